/* The pre-tokenizer patterns: K3's as shipped, and the PCRE2 rewrites of K3's,
 * cl100k_base's and o200k_base's (tokenizer.h says why each differs from its text). */
#include <string.h>

#include "engine/text/pretok.h"
#include "engine/text/tokenizer.h"

/* K3's pat_str exactly as tokenization_kimi.py ships it (k3-model.md §5). */
const char K3_PRETOKENIZE_PATTERN[] =
    "[\\p{Han}]+"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)"
    "|\\s+";

#define WS K3_WS_CHARS
#define UPPER_NOHAN K3_CLASS_UPPER_NOHAN
#define LOWER_NOHAN K3_CLASS_LOWER_NOHAN
#define CONTRACTION "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"

const char K3_PRETOKENIZE_PATTERN_PCRE2[] =
    "\\p{sc:Han}+"
    "|[^\\r\\n\\p{L}\\p{N}]?" UPPER_NOHAN "*" LOWER_NOHAN "+" CONTRACTION
    "|[^\\r\\n\\p{L}\\p{N}]?" UPPER_NOHAN "+" LOWER_NOHAN "*" CONTRACTION
    "|\\p{N}{1,3}"
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" WS "]*[\\r\\n]+"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";

/* tiktoken_ext/openai_public.py: cl100k_base
 * '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+ */
const char K3_CL100K_PATTERN_PCRE2[] =
    "'(?i:[sdmt]|ll|ve|re)"
    "|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+"
    "|\\p{N}{1,3}"
    "| ?[^" WS "\\p{L}\\p{N}]++[\\r\\n]*"
    "|[" WS "]*[\\r\\n]"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";

/* tiktoken_ext/openai_public.py: o200k_base */
const char K3_O200K_PATTERN_PCRE2[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" CONTRACTION
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" CONTRACTION
    "|\\p{N}{1,3}"
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n/]*"
    "|[" WS "]*[\\r\\n]+"
    "|[" WS "]+(?![^" WS "])"
    "|[" WS "]+";

const char *k3_tok_named_pattern(const char *name)
{
    if (!strcmp(name, "k3"))
        return K3_PRETOKENIZE_PATTERN_PCRE2;
    if (!strcmp(name, "cl100k") || !strcmp(name, "cl100k_base"))
        return K3_CL100K_PATTERN_PCRE2;
    if (!strcmp(name, "o200k") || !strcmp(name, "o200k_base"))
        return K3_O200K_PATTERN_PCRE2;
    return NULL;
}

/* The BPE training corpus of k3_tok_synthesize (see engine/corpus/README.md), embedded
 * as one read-only byte string k3_corpus[0 .. k3_corpus_end).  Part of the synthetic
 * model format: changing a byte here changes every synthetic vocabulary. */
    .section .rodata
    .globl k3_corpus
    .globl k3_corpus_end
    .type k3_corpus, @object
    .balign 16
k3_corpus:
    .incbin "engine/corpus/licenses.txt"
    .incbin "engine/corpus/sqlite3-h.txt"
    .incbin "engine/corpus/nodejs-api.txt"
    .incbin "engine/corpus/code.txt"
    .incbin "engine/corpus/multilingual.txt"
k3_corpus_end:
    .byte 0
    .size k3_corpus, . - k3_corpus

    .section .note.GNU-stack,"",@progbits

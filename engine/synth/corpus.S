/* The BPE training corpus of k3_tok_synthesize (see engine/synth/corpus/README.md), embedded
 * as one read-only byte string k3_corpus[0 .. k3_corpus_end).  Part of the synthetic
 * model format: changing a byte here changes every synthetic vocabulary. */
    .section .rodata
    .globl k3_corpus
    .globl k3_corpus_end
    .type k3_corpus, @object
    .balign 16
k3_corpus:
    .incbin "engine/synth/corpus/licenses.txt"
    .incbin "engine/synth/corpus/sqlite3-h.txt"
    .incbin "engine/synth/corpus/nodejs-api.txt"
    .incbin "engine/synth/corpus/code.txt"
    .incbin "engine/synth/corpus/multilingual.txt"
k3_corpus_end:
    .byte 0
    .size k3_corpus, . - k3_corpus

    .section .note.GNU-stack,"",@progbits

/* The planner's built-in calibration (calibration.json), embedded as one read-only,
 * NUL-terminated string k3_calibration_json[0 .. k3_calibration_json_end). */
    .section .rodata
    .globl k3_calibration_json
    .globl k3_calibration_json_end
    .type k3_calibration_json, @object
k3_calibration_json:
    .incbin "engine/plan/calibration.json"
k3_calibration_json_end:
    .byte 0
    .size k3_calibration_json, . - k3_calibration_json

    .section .note.GNU-stack,"",@progbits

/* --drive-model: parsing into the reader's model and the statistics' lines. */
#include "engine/cli/drive_model.h"

/* Waiting the storage added over the model, as a share of all waiting for reads, above
 * which the run says its figures are the storage's: below it a few reads landed late
 * (a loaded machine's scheduling, a page fault) without changing the measure. */
#define LATE_SHARE 0.02

int cli_drive_model_parse(const char *text, struct k3io_drive_model *out, struct k3_err *err)
{
    *out = (struct k3io_drive_model){0};
    if (!text)
        return 0;
    char why[160];
    if (k3io_drive_model_parse(text, out, why, sizeof why))
        return k3_errf(err, "--drive-model: \"%s\": %s", text, why);
    return 0;
}

void cli_drive_model_print(FILE *f, const char *prefix, const struct k3io_drive_model *m,
                           const struct k3io_stats *st)
{
    if (!(m->rate > 0))
        return;
    char model[64];
    k3io_drive_model_format(m, model, sizeof model);
    double n = st->model_reads ? (double)st->model_reads : 1;
    fprintf(f,
            "%s: drive model %s per drive: %llu reads, mean %.3f ms modelled against %.3f ms "
            "by the storage; reads outstanding %.3f s (modelled); %llu reads late, %.4f s "
            "of waiting the storage's\n",
            prefix, model, (unsigned long long)st->model_reads, st->model_read_seconds / n * 1e3,
            st->storage_read_seconds / n * 1e3, st->model_busy_seconds,
            (unsigned long long)st->late_reads, st->late_seconds);
    if (st->late_seconds > LATE_SHARE * st->wait_seconds)
        fprintf(f,
                "%s: note: the storage was slower than the drive model: %.3f s of the %.3f s "
                "spent waiting for reads were past the model's time; these figures are the "
                "storage's, not the model's\n",
                prefix, st->late_seconds, st->wait_seconds);
}

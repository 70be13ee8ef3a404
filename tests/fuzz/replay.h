/* Replays the inputs in tests/fuzz/regressions/<HARNESS>/ through a libFuzzer harness
 * compiled into an ordinary test: every input that once crashed stays a test (run under
 * ASan by make test-asan).  Include after the harness, with HARNESS defined. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/util.h"

int main(void)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/regressions/%s", test_root(), HARNESS);
    DIR *d = opendir(dir);
    REQUIRE(d, "%s: no regression inputs", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[4600];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len = 0;
        void *data = read_file(path, &len);
        REQUIRE(data, "%s unreadable", path);
        LLVMFuzzerTestOneInput(data, len);
        free(data);
        n++;
    }
    closedir(d);
    printf("%s: %d inputs replayed without a crash\n", HARNESS, n);
    return check_result();
}

/* The fault spec parser (engine/stream/faults.h): every kind takes its value and acts on
 * it; an empty value, a malformed number, an empty item or an unknown kind is refused
 * with err naming the item, never read as 0 (a drive-loss: that took drive 0, an eio:
 * that injected nothing); the faults at a place (eio-at, refuse-at) hit that read or
 * submission and no other, and what was seen is counted. */
#include <errno.h>
#include <string.h>

#include "engine/stream/faults.h"
#include "tests/check.h"

static void refused(const char *spec, const char *needle)
{
    struct k3_faults *f = NULL;
    struct k3_err e = {""};
    int rc = k3_faults_parse(&f, spec, 1, &e);
    CHECK(rc == -1, "\"%s\" was accepted", spec);
    CHECK(rc == -1 && strstr(e.msg, needle), "\"%s\": error \"%s\" lacks \"%s\"", spec, e.msg,
          needle);
    if (!rc)
        k3_faults_free(f);
}

static struct k3_faults *accepted(const char *spec)
{
    struct k3_faults *f = NULL;
    struct k3_err e = {""};
    REQUIRE(k3_faults_parse(&f, spec, 1, &e) == 0, "\"%s\" refused: %s", spec, e.msg);
    return f;
}

/* drive-loss:2@3: three reads on drive 2 pass, then every one fails; other drives pass. */
static void test_drive_loss(void)
{
    struct k3_faults *f = accepted("drive-loss:2@3");
    bool flip;
    for (int i = 0; i < 3; i++)
        CHECK(k3_faults_apply(f, 2, 4096, 4096, &flip) == 4096, "read %d of drive 2 failed", i);
    CHECK(k3_faults_apply(f, 2, 4096, 4096, &flip) == -EIO, "the 4th read of drive 2 passed");
    CHECK(k3_faults_apply(f, 0, 4096, 4096, &flip) == 4096, "drive 0 was lost too");
    k3_faults_free(f);
    f = accepted("drive-loss:1");
    CHECK(k3_faults_apply(f, 1, 4096, 4096, &flip) == -EIO, "drive-loss:1 spared a read");
    CHECK(k3_faults_apply(f, 0, 4096, 4096, &flip) == 4096, "drive-loss:1 took drive 0");
    k3_faults_free(f);
}

/* eio:1 fails every read, eio:0 none; a probability written ".5" is a number. */
static void test_probabilities(void)
{
    bool flip;
    struct k3_faults *f = accepted("eio:1");
    CHECK(k3_faults_apply(f, 0, 4096, 4096, &flip) == -EIO, "eio:1 let a read pass");
    k3_faults_free(f);
    f = accepted("eio:0,short:0.0,eagain:.5,delay:0,corrupt:0.001");
    CHECK(k3_faults_corrupt(f), "corrupt:0.001 was not taken");
    k3_faults_free(f);
}

/* eio-at:2 fails the second chunk result only; refuse-at:3 refuses the third submission
 * only; both counted among what was seen. */
static void test_at(void)
{
    bool flip;
    struct k3_faults *f = accepted("eio-at:2,refuse-at:3");
    for (int i = 1; i <= 4; i++)
        CHECK(k3_faults_apply(f, 0, 4096, 4096, &flip) == (i == 2 ? -EIO : 4096),
              "eio-at:2: read %d", i);
    for (int i = 1; i <= 4; i++)
        CHECK(k3_faults_refuse(f) == (i == 3 ? -ENOMEM : 0), "refuse-at:3: submission %d", i);
    struct k3_fault_counts n = k3_faults_counts(f);
    CHECK(n.reads == 4 && n.submits == 4 && n.eio == 1 && n.refused == 1,
          "counted %llu reads, %llu submissions, %llu eio, %llu refused", (unsigned long long)n.reads,
          (unsigned long long)n.submits, (unsigned long long)n.eio, (unsigned long long)n.refused);
    k3_faults_free(f);
    f = accepted("refuse:1");
    CHECK(k3_faults_refuse(f) == -ENOMEM, "refuse:1 let a submission through");
    k3_faults_free(f);
    f = accepted("refuse:0,eio:0");
    CHECK(k3_faults_refuse(f) == 0, "refuse:0 refused a submission");
    k3_faults_free(f);
}

int main(void)
{
    test_drive_loss();
    test_probabilities();
    test_at();
    refused("eio-at:0", "eio-at:0 is not a count from 1");
    refused("eio-at:", "eio-at: is not a count from 1");
    refused("refuse-at:3x", "refuse-at:3x is not a count from 1");
    refused("refuse-at:-3", "refuse-at:-3 is not a count from 1");
    refused("refuse:1.5", "refuse:1.5 is not a probability");
    refused("eio:", "eio: is not a probability");
    refused("short:", "short: is not a probability");
    refused("eio:0.5x", "eio:0.5x is not a probability");
    refused("eio: 0.5", "eio: 0.5 is not a probability");
    refused("eio:-0.1", "eio:-0.1 is not a probability");
    refused("eio:1.5", "eio:1.5 is not a probability");
    refused("eio:nan", "eio:nan is not a probability");
    refused("drive-loss:", "drive-loss: is not DRIVE[@READS]");
    refused("drive-loss:@5", "drive-loss:@5 is not DRIVE[@READS]");
    refused("drive-loss:1@", "drive-loss:1@ is not DRIVE[@READS]");
    refused("drive-loss:-1", "drive-loss:-1 is not DRIVE[@READS]");
    refused("drive-loss: 1", "drive-loss: 1 is not DRIVE[@READS]");
    refused("drive-loss:1@+2", "drive-loss:1@+2 is not DRIVE[@READS]");
    refused("drive-loss:99999999999", "drive-loss:99999999999 is not DRIVE[@READS]");
    refused("eio:0.1,,short:0.1", "\"\" is not kind:value");
    refused("eio:0.1,", "\"\" is not kind:value");
    refused("", "\"\" is not kind:value");
    refused("eio", "\"eio\" is not kind:value");
    refused("bitrot:0.1", "unknown kind \"bitrot\"");
    return check_result();
}

/* Which backend serves, and what the note says.  K3IO_AUTO picks io_uring here with an
 * empty note; K3IO_PREAD is taken as asked, with an empty note.  An area that cannot be
 * registered (a file mapping: EFAULT) still reads, through plain reads, and the note says
 * so.  (Where io_uring is refused: test_reader_refused.c.) */
#include <sys/mman.h>

#include "tests/unit/test_reader.h"

#define SEED 5
#define FILE_BYTES (2u << 20)
#define AREA_BYTES (2u << 20)

/* Reads the whole file into area through r and checks the bytes. */
static void read_back(struct k3io_reader *r, char *area, const char *what)
{
    struct k3io_req q = {.file = 0, .len = FILE_BYTES, .offset = 0, .buf = area, .tag = 9};
    memset(area, 0, FILE_BYTES);
    REQUIRE(k3io_submit(r, &q, 1) == 0, "%s: submit", what);
    struct k3io_done d;
    REQUIRE(k3io_wait(r, &d, 1, 1) == 1, "%s: wait", what);
    CHECK(d.tag == 9 && d.res == (int32_t)FILE_BYTES, "%s: res %d", what, d.res);
    for (uint32_t i = 0; i < FILE_BYTES; i++)
        if ((uint8_t)area[i] != pattern_byte(SEED, i)) {
            CHECK(0, "%s: byte %u differs", what, i);
            break;
        }
}

static struct k3io_reader *create(enum k3io_backend b, int *fd, char *area, char *note,
                                  size_t note_len, int *rc)
{
    struct k3io_config cfg = {.backend = b, .fds = fd, .n_files = 1, .area = area,
                              .area_bytes = AREA_BYTES, .pread_threads = 2};
    struct k3io_reader *r = NULL;
    *rc = k3io_reader_create(&r, &cfg, note, note_len);
    return r;
}

int main(void)
{
    const char *path = test_path("reader_backend.bin");
    make_pattern_file(path, FILE_BYTES, SEED);
    struct k3io_file f;
    REQUIRE(k3io_open(&f, path, O_RDONLY, true) == 0, "open %s", path);
    char *area = k3io_alloc(AREA_BYTES);
    REQUIRE(area, "alloc");
    char note[200];
    int rc;

    struct k3io_reader *r = create(K3IO_AUTO, &f.fd, area, note, sizeof note, &rc);
    REQUIRE(rc == 0, "AUTO: %s", strerror(-rc));
    if (strcmp(k3io_backend_name(r), "io_uring") != 0) {
        /* absent for a reason the kernel or privileges explain: skip; else a bug */
        k3io_reader_destroy(r);
        r = create(K3IO_URING, &f.fd, area, note, sizeof note, &rc);
        REQUIRE(uring_absent(rc), "io_uring refused: %s (%s)", strerror(-rc), note);
        SKIP("io_uring absent on this machine: %s", note);
    }
    CHECK(note[0] == 0, "AUTO with io_uring available: note \"%s\"", note);
    read_back(r, area, "AUTO");
    k3io_reader_destroy(r);

    strcpy(note, "stale");
    r = create(K3IO_PREAD, &f.fd, area, note, sizeof note, &rc);
    REQUIRE(rc == 0, "PREAD: %s", strerror(-rc));
    CHECK(strcmp(k3io_backend_name(r), "pread") == 0, "PREAD gave %s", k3io_backend_name(r));
    CHECK(note[0] == 0, "PREAD as asked: note \"%s\"", note);
    read_back(r, area, "PREAD");
    k3io_reader_destroy(r);

    /* a short note buffer is cut, not overrun */
    char tiny[8];
    memset(tiny, 'x', sizeof tiny);
    r = create(K3IO_PREAD, &f.fd, area, tiny, 4, &rc);
    REQUIRE(rc == 0, "PREAD, tiny note");
    CHECK(tiny[0] == 0 && tiny[4] == 'x', "tiny note overrun");
    k3io_reader_destroy(r);

    /* a file mapping cannot be registered (EFAULT): plain reads, and the note says so */
    const char *map_path = test_path("reader_backend.map");
    struct k3io_file mf;
    REQUIRE(k3io_open(&mf, map_path, O_RDWR | O_CREAT | O_TRUNC, false) == 0, "create map file");
    REQUIRE(ftruncate(mf.fd, AREA_BYTES) == 0, "ftruncate");
    char *mapped = mmap(NULL, AREA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, mf.fd, 0);
    REQUIRE(mapped != MAP_FAILED, "mmap");
    struct k3io_file bf; /* buffered: direct I/O into another file's page cache is not the point */
    REQUIRE(k3io_open(&bf, path, O_RDONLY, false) == 0, "open %s", path);
    r = create(K3IO_URING, &bf.fd, mapped, note, sizeof note, &rc);
    REQUIRE(rc == 0, "URING with a file-mapped area: %s", strerror(-rc));
    CHECK(strstr(note, "registered buffers unavailable (io_uring_register_buffers: Bad address)"),
          "note \"%s\"", note);
    printf("file-mapped area: note \"%s\"\n", note);
    read_back(r, mapped, "URING, plain reads");
    k3io_reader_destroy(r);
    munmap(mapped, AREA_BYTES);
    k3io_close(&bf);
    k3io_close(&mf);
    unlink(map_path);

    free(area);
    k3io_close(&f);
    unlink(path);
    return check_result();
}

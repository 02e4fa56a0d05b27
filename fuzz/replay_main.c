/* Runs a libFuzzer harness without libFuzzer: each argument is a file, or
 * a folder whose files are each passed to LLVMFuzzerTestOneInput once (the
 * committed corpus, in CTest: fuzz_replay_<harness>). Prints
 * "N passed, 0 failed"; a harness that finds a bug aborts. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    size_t cap = 1 << 16, n = 0, r;
    uint8_t *buf = malloc(cap);
    while ((r = fread(buf + n, 1, cap - n, f)) > 0)
        if ((n += r) == cap) buf = realloc(buf, cap *= 2);
    fclose(f);
    uint8_t *exact = malloc(n ? n : 1); /* an exact-size copy: ASan sees a read past the input */
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    int runs = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "replay: %s does not exist\n", argv[i]);
            bad++;
            continue;
        }
        if (!S_ISDIR(sb.st_mode)) {
            bad += run_file(argv[i]) != 0;
            runs++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        char **names = NULL;
        size_t nn = 0;
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            names = realloc(names, (nn + 1) * sizeof *names);
            names[nn] = malloc(strlen(argv[i]) + strlen(e->d_name) + 2);
            sprintf(names[nn++], "%s/%s", argv[i], e->d_name);
        }
        if (d) closedir(d);
        qsort(names, nn, sizeof *names, cmp);
        for (size_t k = 0; k < nn; k++) {
            bad += run_file(names[k]) != 0;
            runs++;
            free(names[k]);
        }
        free(names);
    }
    if (runs == 0) {
        fprintf(stderr, "replay: no inputs\n");
        return 1;
    }
    printf("%d passed, %d failed\n", runs - bad, bad);
    return bad ? 1 : 0;
}

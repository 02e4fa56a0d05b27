/* A dead or stopped peer (run by tests/dist/dead_peer.sh on 3 ranks): rank
 * 1 stops itself (SIGSTOP), rank 2 kills itself (SIGKILL); rank 0's next
 * collective fails after OAR_DIST_TIMEOUT with a message naming both, and
 * oar_dist_finalize then returns in bounded time instead of waiting in
 * MPI_Finalize for peers that will never come. Rank 0 prints its pid
 * ("survivor pid <n>", so that the script can check that it exits) and
 * "survivor finished in <s> s", and exits 0 when all of it held. */
#include "test.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (oar_dist_init(&argc, &argv)) {
        fprintf(stderr, "oar_dist_init: %s\n", oar_last_error());
        return 1;
    }
    int me = oar_dist_rank(), w = oar_dist_world_size();
    if (w != 3) {
        fprintf(stderr, "dead_peer: run on 3 ranks (got %d)\n", w);
        oar_dist_finalize();
        return 1;
    }
    oar_mesh *m = oar_mesh_create(1, (int64_t[]){w}, NULL, NULL);
    oar_tensor *local = oar_ones(OAR_F32, 1, (int64_t[]){4});
    oar_tensor *d = oar_dtensor_from_local(local, m, (oar_placement[]){oar_shard(0)}, NULL); /* all alive */
    CHECK(d != NULL);
    if (me == 1) raise(SIGSTOP);
    if (me == 2) {
        nanosleep(&(struct timespec){.tv_nsec = 300000000}, NULL);
        raise(SIGKILL);
    }
    printf("survivor pid %d\n", (int)getpid());
    fflush(stdout);
    nanosleep(&(struct timespec){.tv_sec = 1}, NULL); /* the peers are gone */
    double t0 = now_s();
    CHECK_FAILS(oar_dtensor_from_local(local, m, (oar_placement[]){oar_shard(0)}, NULL), "did not make the same call");
    printf("survivor's error: %s\n", oar_last_error());
    CHECK(strstr(oar_last_error(), "world rank(s) 1, 2 did not answer") != NULL); /* names the stopped and the dead */
    double t_fail = now_s() - t0;
    oar_tensor_release(d);
    oar_tensor_release(local);
    oar_mesh_release(m);
    int st = oar_dist_finalize();
    double t_done = now_s() - t0;
    CHECK(st == OAR_ERR_STATE); /* finalize says MPI was left without MPI_Finalize */
    CHECK(strstr(oar_last_error(), "timed out") != NULL);
    double limit = oar_dist_timeout() + 5;
    printf("survivor finished in %.1f s (collective failed after %.1f s; limit %.0f s)\n", t_done, t_fail, limit);
    CHECK(t_done <= limit);
    fflush(stdout);
    return test_summary();
}

/* test_topology.c — hwloc placement. Reference: the placement rule computed by hand (cores
 * [r*n/k, (r+1)*n/k), core r mod n when oversubscribed), the binding hwloc reports before and
 * after, and the node-local ranks MPI_Comm_split_type gives independently; exact.
 * Runs on 1 rank (make check) and under `mpirun -np 4` (validation/e2e/placement.sh): every
 * rank checks its own record, rank 0 checks the table has one row per rank. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hwloc.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parallel/topology.h"

static int world_rank, world_size;

/* The process's binding as hwloc reports it (the caller frees it). */
static hwloc_bitmap_t binding_now(const topology_t *t) {
    hwloc_bitmap_t b = hwloc_bitmap_alloc();
    assert_non_null(b);
    assert_int_equal(hwloc_get_cpubind(t->hw, b, HWLOC_CPUBIND_PROCESS), 0);
    return b;
}

static void topology_split_cores_is_even_contiguous_and_mod_n_when_oversubscribed(void **state) {
    (void)state;
    int first, count;
    /* 2 ranks on 8 cores: 0-3, 4-7 */
    assert_int_equal(topology_split_cores(0, 2, 8, &first, &count), 0);
    assert_int_equal(first, 0), assert_int_equal(count, 4);
    assert_int_equal(topology_split_cores(1, 2, 8, &first, &count), 0);
    assert_int_equal(first, 4), assert_int_equal(count, 4);
    /* 3 ranks on 8 cores: [0,2), [2,5), [5,8) — every core used once */
    int want_first[3] = {0, 2, 5}, want_count[3] = {2, 3, 3};
    for (int r = 0; r < 3; r++) {
        assert_int_equal(topology_split_cores(r, 3, 8, &first, &count), 0);
        assert_int_equal(first, want_first[r]);
        assert_int_equal(count, want_count[r]);
    }
    /* 8 ranks on 2 cores (our tests): oversubscribed, core r mod 2 */
    for (int r = 0; r < 8; r++) {
        assert_int_equal(topology_split_cores(r, 8, 2, &first, &count), 1);
        assert_int_equal(first, r % 2);
        assert_int_equal(count, 1);
    }
    /* 1 rank takes the whole node */
    assert_int_equal(topology_split_cores(0, 1, 2, &first, &count), 0);
    assert_int_equal(first, 0), assert_int_equal(count, 2);
}

static void topology_bind_none_leaves_binding_unchanged(void **state) {
    (void)state;
    topology_t t;
    hwloc_topology_t hw;
    assert_int_equal(hwloc_topology_init(&hw), 0);
    assert_int_equal(hwloc_topology_load(hw), 0);
    hwloc_bitmap_t before = hwloc_bitmap_alloc();
    assert_int_equal(hwloc_get_cpubind(hw, before, HWLOC_CPUBIND_PROCESS), 0);
    topology_place(&t, MPI_COMM_WORLD, "none");
    hwloc_bitmap_t after = binding_now(&t);
    char b[64], a[64];
    hwloc_bitmap_list_snprintf(b, sizeof b, before);
    hwloc_bitmap_list_snprintf(a, sizeof a, after);
    printf("  rank %d: binding before %s, after %s; status \"%s\"\n", world_rank, b, a,
           t.me.binding);
    assert_true(hwloc_bitmap_isequal(before, after));
    assert_non_null(strstr(t.me.binding, "(bind_mode = none)"));
    assert_true(t.me.cores[0] != '\0');
    hwloc_bitmap_free(before);
    hwloc_bitmap_free(after);
    hwloc_topology_destroy(hw);
    topology_destroy(&t);
}

static void topology_place_cores_gives_nonempty_core_list_and_one_aggregator(void **state) {
    (void)state;
    topology_t t;
    hwloc_topology_t hw;
    assert_int_equal(hwloc_topology_init(&hw), 0);
    assert_int_equal(hwloc_topology_load(hw), 0);
    hwloc_bitmap_t before = hwloc_bitmap_alloc();
    assert_int_equal(hwloc_get_cpubind(hw, before, HWLOC_CPUBIND_PROCESS), 0);
    topology_place(&t, MPI_COMM_WORLD, "cores");
    hwloc_bitmap_t after = binding_now(&t);
    /* node-local rank, independently */
    MPI_Comm node;
    int local_rank, local_size;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);
    char host[64] = {0};
    gethostname(host, sizeof host - 1);
    printf("  rank %d: host %s local %d/%d cores %s (%d) numa %s gpu %s %s aggregator %d: %s\n",
           world_rank, t.me.host, t.me.local_rank, t.me.local_size, t.me.cores, t.me.n_cores,
           t.me.numa, t.me.gpu, t.me.gpu_pci, t.me.io_aggregator, t.me.binding);
    assert_string_equal(t.me.host, host);
    assert_int_equal(t.me.world_rank, world_rank);
    assert_int_equal(t.me.local_rank, local_rank);
    assert_int_equal(t.me.local_size, local_size);
    assert_int_equal(t.me.io_aggregator, local_rank == 0);
    assert_true(t.me.cores[0] != '\0' && t.me.n_cores > 0);
    assert_true(t.me.numa[0] != '\0' && t.me.gpu[0] != '\0');
    assert_int_equal(t.me.oversubscribed, local_size > t.me.node_cores);
    int aggregators = t.me.io_aggregator, nodes = 0;
    MPI_Allreduce(&aggregators, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    assert_int_equal(t.n_nodes, nodes);
    if (strncmp(t.me.binding, "bound by llmtrain", 17) == 0) {
        /* the binding is exactly this rank's share of the node's cores */
        int first, count;
        topology_split_cores(local_rank, local_size, t.me.node_cores, &first, &count);
        hwloc_obj_type_t type =
            hwloc_get_nbobjs_by_type(t.hw, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
        hwloc_bitmap_t want = hwloc_bitmap_alloc();
        for (int i = first; i < first + count; i++)
            hwloc_bitmap_or(want, want, hwloc_get_obj_by_type(t.hw, type, i)->cpuset);
        assert_true(hwloc_bitmap_isequal(want, after));
        assert_int_equal(t.me.n_cores, count);
        assert_int_equal(strstr(t.me.binding, "oversubscribed") != NULL, t.me.oversubscribed);
        hwloc_bitmap_free(want);
    } else {
        assert_true(strncmp(t.me.binding, "bound by launcher", 17) == 0 ||
                    strncmp(t.me.binding, "not permitted: ", 15) == 0);
        if (strncmp(t.me.binding, "bound by launcher", 17) == 0)
            assert_true(hwloc_bitmap_isequal(before, after)); /* kept as the launcher made it */
    }
    topology_print(&t, MPI_COMM_WORLD);
    /* undo the binding so later tests start from the machine as the launcher gave it */
    if (strncmp(t.me.binding, "bound by llmtrain", 17) == 0)
        assert_int_equal(hwloc_set_cpubind(hw, before, HWLOC_CPUBIND_PROCESS), 0);
    hwloc_bitmap_free(before);
    hwloc_bitmap_free(after);
    hwloc_topology_destroy(hw);
    topology_destroy(&t);
}

/* The value of `key` in `info` ("" when absent). */
static const char *info_value(MPI_Info info, const char *key) {
    static char value[MPI_MAX_INFO_VAL + 1];
    int flag = 0;
    value[0] = '\0';
    MPI_Info_get(info, key, MPI_MAX_INFO_VAL, value, &flag);
    if (!flag) value[0] = '\0';
    return value;
}

static void topology_io_hints_have_cb_nodes_per_node_and_cb_config_list(void **state) {
    (void)state;
    topology_t t;
    topology_place(&t, MPI_COMM_WORLD, "none");
    char nodes[16];
    snprintf(nodes, sizeof nodes, "%d", t.n_nodes);
    MPI_Info info = topology_io_hints(&t, MPI_COMM_WORLD, 0, 0);
    const char *keys[] = {"cb_nodes", "cb_config_list", "romio_cb_write", "romio_cb_read"};
    for (int i = 0; i < 4; i++) printf("  %s = %s\n", keys[i], info_value(info, keys[i]));
    assert_string_equal(info_value(info, "cb_nodes"), nodes);
    assert_string_equal(info_value(info, "cb_nodes"), "1"); /* every test rank is on this host */
    assert_string_equal(info_value(info, "cb_config_list"), "*:1");
    assert_string_equal(info_value(info, "romio_cb_write"), "enable");
    assert_string_equal(info_value(info, "romio_cb_read"), "enable");
    assert_string_equal(info_value(info, "striping_factor"), "");
    assert_string_equal(info_value(info, "striping_unit"), "");
    MPI_Info_free(&info);
    info = topology_io_hints(&t, MPI_COMM_WORLD, 8, 4L << 20);
    assert_string_equal(info_value(info, "striping_factor"), "8");
    assert_string_equal(info_value(info, "striping_unit"), "4194304");
    MPI_Info_free(&info);
    topology_destroy(&t);
}

static void topology_print_table_has_a_header_and_one_row_per_rank(void **state) {
    (void)state;
    topology_t t;
    topology_place(&t, MPI_COMM_WORLD, "none");
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    topology_fprint(&t, MPI_COMM_WORLD, out);
    fclose(out);
    if (world_rank == 0) {
        fputs(text, stdout);
        assert_non_null(strstr(text, "rank"));
        const char *cols[] = {"host", "local", "cores", "numa", "gpu", "aggr", "binding"};
        for (int i = 0; i < 7; i++) assert_non_null(strstr(text, cols[i]));
        /* rows are the lines that start with a rank number, in rank order */
        int rows = 0, r;
        for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
            if (sscanf(p, "%d", &r) == 1) {
                assert_int_equal(r, rows);
                rows++;
            }
        assert_int_equal(rows, world_size);
    } else {
        assert_int_equal(len, 0);
    }
    free(text);
    topology_destroy(&t);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(topology_split_cores_is_even_contiguous_and_mod_n_when_oversubscribed),
        cmocka_unit_test(topology_bind_none_leaves_binding_unchanged),
        cmocka_unit_test(topology_place_cores_gives_nonempty_core_list_and_one_aggregator),
        cmocka_unit_test(topology_io_hints_have_cb_nodes_per_node_and_cb_config_list),
        cmocka_unit_test(topology_print_table_has_a_header_and_one_row_per_rank),
    };
    int failed = cmocka_run_group_tests_name("topology", tests, NULL, NULL);
    MPI_Finalize();
    return failed ? 1 : 0;
}

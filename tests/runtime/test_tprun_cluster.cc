// Running on several nodes: the GPU a rank takes (tp_node_gpu), whether
// ranks share GPUs (tp_gpu_sharing, runtime/comm/gpu_share.h), the rank
// map and the check that a tensor-parallel group stays inside a node
// (runtime/comm/node.h) on layouts of nodes written here; tprun -n's
// launcher options reaching mpiexec (a stand-in mpiexec that records its
// arguments, and MPICH's own with a hostfile); a task of a multi-task srun
// step taken as a rank; and the rank map of real tp 2 and dp 2 x tp 2 runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <sys/stat.h>

extern "C" {
#include "runtime/comm/gpu_share.h"
#include "runtime/comm/node.h"
}
#include "tests/support/process.h"
#include "tests/support/token_files.h"
#include "tests/support/train_harness.h"

namespace {

using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::TempDir;

using tpcc_test::kTprun;
const std::string kFixtures = std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/train/";

tp_rank_node node_at(int index, int local_rank, int local_size, const char *host)
{
    tp_rank_node n = {index, 1, local_rank, local_size, ""};
    snprintf(n.host, sizeof n.host, "%s", host);
    return n;
}

// Every rank's node, named "host<index>", from each rank's node index.
std::vector<tp_rank_node> layout(const std::vector<int> &node_of_rank)
{
    std::vector<tp_rank_node> nodes;
    for (int index : node_of_rank)
        nodes.push_back(node_at(index, 0, 1, ("host" + std::to_string(index)).c_str()));
    return nodes;
}

std::string rank_map(const std::vector<int> &node_of_rank, int tp)
{
    std::vector<tp_rank_node> nodes = layout(node_of_rank);
    tp_buf b;
    tp_buf_init(&b);
    tp_node_rank_map(&b, nodes.data(), int(nodes.size()), tp, "  ");
    std::string text = b.data ? b.data : "";
    tp_buf_free(&b);
    return text;
}

// ---- the GPU of a rank ----

// One GPU seen is the rank's own (Slurm's --gpus-per-task=1), whatever the
// node's rank count; several are taken by local rank.
TEST(NodeGpu, TheOnlyVisibleGpuOrTheLocalRanks)
{
    char err[400] = "";
    tp_rank_node third_of_four = node_at(1, 2, 4, "gpu7");
    EXPECT_EQ(tp_node_gpu(&third_of_four, 1, err, sizeof err), 0) << err;
    EXPECT_EQ(tp_node_gpu(&third_of_four, 4, err, sizeof err), 2) << err;
    EXPECT_EQ(tp_node_gpu(&third_of_four, 8, err, sizeof err), 2) << err;
    tp_rank_node alone = node_at(0, 0, 1, "gpu7");
    EXPECT_EQ(tp_node_gpu(&alone, 8, err, sizeof err), 0) << err;
}

// More ranks on a node than GPUs it shows share them round-robin (their
// collectives then stage through host memory); no GPU is an error naming
// the node.
TEST(NodeGpu, MoreRanksThanGpusShareThemAndNoGpuIsAnError)
{
    char err[400] = "";
    tp_rank_node fourth_of_four = node_at(1, 3, 4, "gpu7");
    EXPECT_EQ(tp_node_gpu(&fourth_of_four, 2, err, sizeof err), 1) << err;
    EXPECT_EQ(tp_node_gpu(&fourth_of_four, 3, err, sizeof err), 0) << err;
    tp_rank_node first_of_four = node_at(1, 0, 4, "gpu7");
    EXPECT_EQ(tp_node_gpu(&first_of_four, 3, err, sizeof err), 0) << err;
    EXPECT_EQ(tp_node_gpu(&first_of_four, 0, err, sizeof err), -1);
    EXPECT_TRUE(contains(err, "node gpu7 shows this rank no usable GPU")) << err;
}

// ---- ranks sharing a GPU ----

// Every rank's node (index from node_of_rank, 2 ranks a node unless told)
// and device bus id.
std::vector<tp_rank_gpu> gpus(const std::vector<int> &node_of_rank, const std::vector<std::string> &bus)
{
    std::vector<tp_rank_gpu> v;
    for (size_t r = 0; r < node_of_rank.size(); r++) {
        tp_rank_gpu g = {};
        g.node = node_at(node_of_rank[r], 0, 2, ("host" + std::to_string(node_of_rank[r])).c_str());
        snprintf(g.bus_id, sizeof g.bus_id, "%s", bus[r].c_str());
        v.push_back(g);
    }
    return v;
}

// A GPU of each rank's own shares nothing, even where every process sees
// one device (Slurm's --gpus-per-task=1: each a different one); the same
// bus id on two nodes is two GPUs.
TEST(GpuShare, DistinctDevicesOnANodeShareNothing)
{
    char msg[300] = "";
    auto own = gpus({0, 0, 1, 1}, {"0000:41:00.0", "0000:42:00.0", "0000:41:00.0", "0000:42:00.0"});
    EXPECT_EQ(tp_gpu_sharing(own.data(), 4, msg, sizeof msg), 0);
    EXPECT_STREQ(msg, "");
}

// Ranks on one device: the first node where they outnumber their GPUs,
// with the counts and the host, and how many nodes share.
TEST(GpuShare, RanksOnOneDeviceNameTheFirstSharingNode)
{
    char msg[300] = "";
    auto one = gpus({0, 0}, {"0000:01:00.0", "0000:01:00.0"});
    EXPECT_EQ(tp_gpu_sharing(one.data(), 2, msg, sizeof msg), 1);
    EXPECT_STREQ(msg, "2 ranks share 1 GPU on node 0 (host0)");
    auto second = gpus({0, 0, 1, 1, 1, 2, 2}, {"a", "b", "a", "b", "a", "a", "a"});
    EXPECT_EQ(tp_gpu_sharing(second.data(), 7, msg, sizeof msg), 2);
    EXPECT_STREQ(msg, "3 ranks share 2 GPUs on node 1 (host1)");
}

// ---- the rank map ----

TEST(RankMap, OneLinePerNodeWithTheDpAndTpIndices)
{
    EXPECT_EQ(rank_map({0, 0}, 2), "node 0 (host0): 0-1 (tp 0-1)\n");
    EXPECT_EQ(rank_map({0, 0, 0, 0}, 2), "node 0 (host0): 0-3 (dp 0-1 x tp 0-1)\n");
    EXPECT_EQ(rank_map({0, 0, 0, 0, 1, 1, 1, 1}, 2),
              "node 0 (host0): 0-3 (dp 0-1 x tp 0-1)\n"
              "  node 1 (host1): 4-7 (dp 2-3 x tp 0-1)\n");
    // ranks dealt round-robin: each node holds half of every tp group
    EXPECT_EQ(rank_map({0, 1, 0, 1}, 2),
              "node 0 (host0): 0,2 (dp 0-1 x tp 0)\n"
              "  node 1 (host1): 1,3 (dp 0-1 x tp 1)\n");
    // 3 ranks a node, tp 2: node 0 holds a tp group and half of the next
    EXPECT_EQ(rank_map({0, 0, 0, 1, 1, 1}, 2),
              "node 0 (host0): 0-2 (part of dp 0-1, tp 0-1)\n"
              "  node 1 (host1): 3-5 (part of dp 1-2, tp 0-1)\n");
}

// 64 ranks stay short: 8 nodes are 8 lines, more nodes end in a count.
TEST(RankMap, ShortForSixtyFourRanks)
{
    std::vector<int> eight, sixteen;
    for (int r = 0; r < 64; r++) {
        eight.push_back(r / 8);
        sixteen.push_back(r / 4);
    }
    std::string map = rank_map(eight, 8);
    EXPECT_EQ(std::count(map.begin(), map.end(), '\n'), 8) << map;
    EXPECT_TRUE(contains(map, "node 7 (host7): 56-63 (dp 7 x tp 0-7)\n")) << map;
    map = rank_map(sixteen, 4);
    EXPECT_EQ(std::count(map.begin(), map.end(), '\n'), 9) << map;
    EXPECT_TRUE(contains(map, "  ... and 8 more nodes\n")) << map;
}

// ---- a tensor-parallel group across nodes ----

TEST(TpSpansNodes, NoneWhenEveryNodeHoldsWholeGroups)
{
    char msg[600] = "";
    std::vector<tp_rank_node> two_by_four = layout({0, 0, 0, 0, 1, 1, 1, 1});
    EXPECT_EQ(tp_node_tp_spans(two_by_four.data(), 8, 2, msg, sizeof msg), 0);
    EXPECT_EQ(tp_node_tp_spans(two_by_four.data(), 8, 4, msg, sizeof msg), 0);
    EXPECT_STREQ(msg, "");
}

TEST(TpSpansNodes, TheFirstSpanningGroupTheNodesAndTheFix)
{
    char msg[600] = "";
    // -ppn 3 with tp 2: group 1 (ranks 2-3) is split between the nodes
    std::vector<tp_rank_node> ppn3 = layout({0, 0, 0, 1, 1, 1});
    EXPECT_EQ(tp_node_tp_spans(ppn3.data(), 6, 2, msg, sizeof msg), 1);
    EXPECT_TRUE(contains(msg, "tensor-parallel group 1 (ranks 2-3) spans nodes 0 (host0) and 1 (host1)")) << msg;
    EXPECT_TRUE(contains(msg, "Megatron keeps tp inside a node; launch with -ppn a multiple of 2")) << msg;
    // tp 8 over nodes of 4 ranks: every group spans two nodes
    std::vector<tp_rank_node> four_by_four = layout({0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
    EXPECT_EQ(tp_node_tp_spans(four_by_four.data(), 16, 8, msg, sizeof msg), 2);
    EXPECT_TRUE(contains(msg, "tensor-parallel group 0 (ranks 0-7) spans nodes 0 (host0) and 1 (host1) (and 1 "
                              "more group)")) << msg;
    // round-robin: every group
    std::vector<tp_rank_node> cyclic = layout({0, 1, 0, 1});
    EXPECT_EQ(tp_node_tp_spans(cyclic.data(), 4, 2, msg, sizeof msg), 2);
}

// ---- tprun -n's launcher options ----

// A stand-in mpiexec first on PATH, writing its arguments a line each.
struct FakeMpiexec {
    TempDir dir;
    FakeMpiexec()
    {
        std::string script = dir.write("mpiexec", "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"" + dir.path + "/argv\"\n");
        EXPECT_EQ(chmod(script.c_str(), 0755), 0);
    }
    std::string path_env() const { return "PATH=" + dir.path + ":" + getenv("PATH"); }
    std::string argv() const { return tpcc_test::slurp(dir.path + "/argv"); }
    bool ran() const
    {
        struct stat st;
        return stat((dir.path + "/argv").c_str(), &st) == 0;
    }
};

// -f/--hostfile/-hostfile and -ppn go before the program as hydra spells
// them; the program's command line follows as given, for the ranks.
TEST(Launcher, HostfileAndPpnReachMpiexec)
{
    TempDir d;
    std::string hosts = d.write("hosts", "node1:4\nnode2:4\n"), sched = d.write("x.sched", "{}");
    for (const char *spelling : {"-f", "--hostfile", "-hostfile"}) {
        FakeMpiexec fake;
        Proc p = tpcc_test::run_program(kTprun, {"-n", "8", spelling, hosts, "-ppn", "4", sched, "--backend", "cpu"},
                                        {fake.path_env()});
        ASSERT_EQ(p.code(), 0) << spelling << ": " << p.describe();
        EXPECT_EQ(fake.argv(), "-n\n8\n-f\n" + hosts + "\n-ppn\n4\n" + kTprun + "\n-n\n8\n" + spelling + "\n" + hosts +
                                   "\n-ppn\n4\n" + sched + "\n--backend\ncpu\n")
            << spelling;
    }
    FakeMpiexec fake;
    Proc p = tpcc_test::run_program(kTprun, {"-n", "2", sched, "--backend", "cpu"}, {fake.path_env()});
    ASSERT_EQ(p.code(), 0) << p.describe();
    EXPECT_EQ(fake.argv(), "-n\n2\n" + kTprun + "\n-n\n2\n" + sched + "\n--backend\ncpu\n");
}

// Launcher options without -n, or with a value that cannot be, are errors
// before anything starts.
TEST(Launcher, BadHostOptionsAreClearErrors)
{
    TempDir d;
    std::string hosts = d.write("hosts", "localhost:4\n"), sched = d.write("x.sched", "{}");
    struct Case {
        std::vector<std::string> args;
        std::string message;
    };
    std::vector<Case> cases = {
        {{"-f", hosts, sched}, "tprun: -f/--hostfile goes with -n N"},
        {{"--hostfile", hosts, sched}, "tprun: -f/--hostfile goes with -n N"},
        {{"-ppn", "2", sched}, "tprun: -ppn goes with -n N"},
        {{"-n", "2", "-ppn", "two", sched}, "tprun: -ppn takes a number of ranks per node, not 'two'"},
        {{"-n", "2", "-ppn", "0", sched}, "tprun: -ppn takes a number of ranks per node, not '0'"},
        // decimal and in range: 2^32 + 1 wrapped to 1 rank once cast to int
        {{"-n", "4294967297", sched}, "tprun: -n takes a number of ranks from 1 to 4096, not '4294967297'"},
        {{"-n", "0x2", sched}, "tprun: -n takes a number of ranks from 1 to 4096, not '0x2'"},
        {{"-n", "2", "--threads", "4294967297", sched}, "tprun: --threads takes a number of threads from 1 to 256"},
        {{"-n", "2", "--repeat", " 3", sched}, "tprun: --repeat takes a number of forward steps from 1 to 100000"},
        {{"-n", "2", "--tolerance", "inf", sched}, "tprun: --tolerance takes a non-negative decimal number, not 'inf'"},
        {{"-n", "2", sched, "-f"}, "tprun: -f needs a value"},
        {{"-n", "2", "-f", d.path + "/missing", sched},
         "tprun: -f: cannot read the hostfile " + d.path + "/missing: No such file or directory"},
    };
    for (const Case &c : cases) {
        FakeMpiexec fake;
        std::vector<std::string> args = c.args;
        args.insert(args.begin(), {"--backend", "cpu"});
        Proc p = tpcc_test::run_program(kTprun, args, {fake.path_env()});
        EXPECT_EQ(p.code(), 2) << c.message << ": " << p.describe();
        EXPECT_TRUE(contains(p.err, c.message)) << p.err;
        EXPECT_FALSE(fake.ran()) << c.message;
    }
}

// A task of a multi-task srun step is a rank, not a launcher: tprun -n
// under it starts no mpiexec, and an MPI that does not see srun's tasks
// (no PMI) is an error saying so.
TEST(Launcher, ASrunTaskIsARank)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::string sched = d.path + "/tp2.sched";
    ASSERT_EQ(tpcc_test::run_tpcc({std::string(TPCC_SOURCE_DIR) + "/plans/llama-tiny.plan", "-D", "tp=2", "-o", sched})
                  .code(),
              0);
    FakeMpiexec fake;
    Proc p = tpcc_test::run_program(kTprun, {"-n", "2", sched, "--backend", "cpu", "--labels", "tokens"},
                                    {fake.path_env(), "SLURM_PROCID=0", "SLURM_STEP_NUM_TASKS=2"});
    EXPECT_NE(p.code(), 0) << p.describe();
    EXPECT_FALSE(fake.ran()) << fake.argv();
    EXPECT_TRUE(contains(p.err, "srun started 2 tasks but MPI sees 1 rank")) << p.err;
    // a batch script (no step of srun's) launches as usual
    FakeMpiexec batch;
    Proc b = tpcc_test::run_program(kTprun, {"-n", "2", sched, "--backend", "cpu", "--labels", "tokens"},
                                    {batch.path_env(), "SLURM_PROCID=0", "SLURM_JOB_ID=7"});
    EXPECT_EQ(b.code(), 0) << b.describe();
    EXPECT_TRUE(batch.ran());
}

// MPICH's hydra with a hostfile of this machine: the job runs, and the
// start-up lines map the ranks to the node.
TEST(Launcher, HydraHostfileRunsAndTheRankMapShowsTheNode)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::string sched = d.path + "/tp2.sched", hosts = d.write("hosts", "localhost:4\n");
    ASSERT_EQ(tpcc_test::run_tpcc({std::string(TPCC_SOURCE_DIR) + "/plans/llama-tiny.plan", "-D", "tp=2", "-o", sched})
                  .code(),
              0);
    Proc p = tpcc_test::run_program(kTprun, {"-n", "2", "-f", hosts, sched, "--backend", "cpu", "--labels", "tokens"});
    ASSERT_EQ(p.code(), 0) << p.describe();
    EXPECT_TRUE(contains(p.out, " (2 ranks, cpu backend)\n  ranks       node 0 (")) << p.out;
    EXPECT_TRUE(contains(p.out, "): 0-1 (tp 0-1)\n  plan ")) << p.out;
    EXPECT_FALSE(contains(p.err, "warning")) << p.err;
}

// A dp 2 x tp 2 training run prints the map before its steps.
TEST(Launcher, DataParallelRunMapsDpAndTp)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::string plan, sched = d.path + "/dp2tp2.sched";
    ASSERT_NO_FATAL_FAILURE(tpcc_test::dp_plan(d, plan));
    Proc c = tpcc_test::compile_dp(plan, 2, 2, 2, sched);
    ASSERT_EQ(c.code(), 0) << c.describe();
    std::vector<int32_t> toks;
    for (int i = 0; i < 64; i++)
        toks.push_back(int32_t(i * 37 % 128));
    std::string data = d.write("tokens.bin", tpcc_test::llmc(20240801, 7, toks));
    Proc t = tpcc_test::run_program(kTprun, {"-n", "4", "-ppn", "4", sched, "--weights", kFixtures + "llama/", "--data",
                                             data, "--steps", "1"},
                                    {}, 300);
    ASSERT_EQ(t.code(), 0) << t.describe();
    EXPECT_TRUE(contains(t.out, "dp2tp2.sched (4 ranks, cpu backend)\n  ranks       node 0 (")) << t.out;
    EXPECT_TRUE(contains(t.out, "): 0-3 (dp 0-1 x tp 0-1)\n")) << t.out;
    EXPECT_TRUE(contains(t.out, "step 1/1  loss ")) << t.out;
}

}  // namespace

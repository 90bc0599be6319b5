// The training loop's parts that need no training schedule:
// runtime/train/tokens.c (the token stream: .npy of four integer dtypes,
// llm.c's .bin of both kinds, every way they can be wrong),
// runtime/train/log.c's step line (a progress line on a terminal),
// runtime/train/lr.c (against values worked out by hand from
// transformers' get_cosine_schedule_with_warmup and
// get_constant_schedule_with_warmup), runtime/train/options.c, and
// runtime/io/safetensors_write.c (round trip through the checkpoint
// reader, and the header's layout byte by byte).
#include <gtest/gtest.h>

#include <jansson.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/token_files.h"
extern "C" {
#include "runtime/comm/comm.h"
#include "runtime/io/safetensors_write.h"
#include "runtime/io/weights.h"
#include "runtime/train/dp.h"
#include "runtime/train/gather.h"
#include "runtime/train/log.h"
#include "runtime/train/lr.h"
#include "runtime/train/optim.h"
#include "runtime/train/save.h"
#include "runtime/train/options.h"
#include "runtime/train/settings.h"
#include "runtime/train/tokens.h"
#include "runtime/train/batches.h"
}

namespace {

using tpcc_test::contains;
using tpcc_test::llmc;
using tpcc_test::npy;
using tpcc_test::raw;
using tpcc_test::TempDir;

struct Opened {
    int rc;
    std::vector<int64_t> values;
    std::string err;
};

// A stream's header, then every value read.
Opened open_tokens(const std::string &path)
{
    tr_tokens t;
    char err[800] = "";
    Opened o{tr_tokens_open(&t, path.c_str(), err, sizeof err), {}, err};
    if (o.rc == 0) {
        o.values.resize((size_t)t.count);
        o.rc = tr_tokens_read(&t, 0, t.count, o.values.data(), err, sizeof err);
        o.err = err;
        tr_tokens_close(&t);
    }
    return o;
}

const std::vector<int32_t> kIds = {5, 0, 127, 3, 64, 1};
const std::vector<int64_t> kValues(kIds.begin(), kIds.end());

TEST(TrainTokens, NpyOfEveryIntegerDtype)
{
    TempDir d;
    std::vector<int64_t> i8(kIds.begin(), kIds.end());
    std::vector<uint16_t> u2(kIds.begin(), kIds.end());
    std::vector<uint32_t> u4(kIds.begin(), kIds.end());
    for (auto [name, bytes] : std::vector<std::pair<std::string, std::string>>{
             {"i4.npy", npy("<i4", raw(kIds), "(6,)")}, {"i8.npy", npy("<i8", raw(i8), "(6,)")},
             {"u2.npy", npy("<u2", raw(u2), "(6,)")}, {"u4.npy", npy("<u4", raw(u4), "(6,)")}}) {
        Opened o = open_tokens(d.write(name, bytes));
        ASSERT_EQ(o.rc, 0) << name << ": " << o.err;
        EXPECT_EQ(o.values, kValues) << name;
    }
    // values beyond int32 are read as they are: the rules judge them (TrainBatches)
    Opened big = open_tokens(d.write("big.npy", npy("<u4", raw(std::vector<uint32_t>{3000000000u}), "(1,)")));
    ASSERT_EQ(big.rc, 0) << big.err;
    EXPECT_EQ(big.values, std::vector<int64_t>{3000000000});
}

TEST(TrainTokens, LlmcBinOfBothKinds)
{
    TempDir d;
    std::vector<uint16_t> u2(kIds.begin(), kIds.end());
    std::vector<uint32_t> u4(kIds.begin(), kIds.end());
    u4[2] = 70000;          // beyond uint16: the llama-3 kind's reason to exist
    Opened gpt2 = open_tokens(d.write("gpt2.bin", llmc(20240520, 1, u2)));
    ASSERT_EQ(gpt2.rc, 0) << gpt2.err;
    EXPECT_EQ(gpt2.values, kValues);
    Opened llama = open_tokens(d.write("llama3.bin", llmc(20240801, 7, u4)));
    ASSERT_EQ(llama.rc, 0) << llama.err;
    EXPECT_EQ(llama.values[2], 70000);
    EXPECT_EQ(llama.values[5], 1);
}

// Read in pieces: any range, the bytes counted; a file cut short after it
// was opened is an error, not a short read.
TEST(TrainTokens, ReadOnDemandAndCountedInBytes)
{
    TempDir d;
    std::vector<uint16_t> u2(kIds.begin(), kIds.end());
    const std::string path = d.write("gpt2.bin", llmc(20240520, 1, u2));
    tr_tokens t;
    char err[800] = "";
    ASSERT_EQ(tr_tokens_open(&t, path.c_str(), err, sizeof err), 0) << err;
    EXPECT_EQ(t.count, 6);
    EXPECT_EQ(t.bytes_read, 0u);            // the header alone
    std::vector<int64_t> v(3);
    ASSERT_EQ(tr_tokens_read(&t, 2, 3, v.data(), err, sizeof err), 0) << err;
    EXPECT_EQ(v, (std::vector<int64_t>{127, 3, 64}));
    EXPECT_EQ(t.bytes_read, 6u);
    EXPECT_EQ(tr_tokens_read(&t, 4, 3, v.data(), err, sizeof err), -1);
    EXPECT_TRUE(contains(err, "values 4 to 7 asked for, the stream holds 6")) << err;
    std::filesystem::resize_file(path, 1024 + 8);
    EXPECT_EQ(tr_tokens_read(&t, 2, 3, v.data(), err, sizeof err), -1);
    EXPECT_TRUE(contains(err, path + ": cut short since it was opened: values 2 to 5 are gone")) << err;
    tr_tokens_close(&t);
}

TEST(TrainTokens, EveryFaultIsAnErrorNamingTheFile)
{
    TempDir d;
    std::vector<uint16_t> u2(kIds.begin(), kIds.end());
    struct Case {
        std::string name, bytes, expect;
    };
    std::vector<Case> cases = {
        {"magic.bin", llmc(20240326, 1, u2), "not an llm.c token file (magic 20240326"},
        {"version.bin", llmc(20240520, 2, u2), "not an llm.c token file"},
        {"short.bin", llmc(20240520, 1, u2, 7), "the header says 7 tokens (14 bytes after the header), the file holds 12"},
        {"long.bin", llmc(20240520, 1, u2, 5), "the header says 5 tokens"},
        {"header.bin", std::string(100, '\0'), "shorter than llm.c's 1024-byte header"},
        {"two_d.npy", npy("<i4", raw(kIds), "(2, 3)"), "a token stream is a 1-D array, this one is [2, 3]"},
        {"float.npy", npy("<f4", raw(std::vector<float>{1, 2}), "(2,)"), "token ids must be int32"},
        {"cut.npy", npy("<i4", raw(kIds), "(7,)"), "data is truncated: 24 of 28 bytes"},
    };
    for (const Case &c : cases) {
        std::string path = d.write(c.name, c.bytes);
        Opened o = open_tokens(path);
        EXPECT_EQ(o.rc, -1) << c.name;
        EXPECT_TRUE(contains(o.err, c.expect)) << c.name << ": " << o.err;
        EXPECT_TRUE(contains(o.err, path)) << c.name << ": " << o.err;
    }
    Opened missing = open_tokens(d.path + "/none.bin");
    EXPECT_EQ(missing.rc, -1);
    EXPECT_TRUE(contains(missing.err, "cannot open")) << missing.err;
}

// tr_batches_open, then on one rank tr_batches_check (the values' rules,
// the labelled tokens counted); the streams beside the data may be null.
int open_batches(tr_batches *b, const tr_batch_shape &shape, const std::string &data, const char *labels, char *err,
                 size_t errlen, const char *attention_mask = nullptr, const char *position_ids = nullptr)
{
    const char *paths[TR_STREAM_KINDS] = {data.c_str(), labels, attention_mask, position_ids};
    if (tr_batches_open(b, &shape, paths, err, errlen))
        return -1;
    tp_comm one;
    tp_comm_single(&one);
    bool everywhere = false;
    int rc = tr_batches_check(b, &one, &everywhere, err, errlen);
    EXPECT_EQ(everywhere, rc != 0);      // a failure every rank holds; nothing else
    return rc;
}

// Step i's micro-batch 0 of replica d: its ids, or its labels.
std::vector<int32_t> step_of(tr_batches *b, int64_t i, int d, bool labels)
{
    char err[600] = "";
    EXPECT_EQ(tr_batches_read(b, i, 0, d, err, sizeof err), 0) << err;
    const int32_t *v = labels ? b->step_labels : b->step_ids;
    return std::vector<int32_t>(v, v + b->shape.batch * b->shape.seq);
}

// What each step reads (batches.h): the stream in order, replica d of step
// i at (i·D + d)·B·S; labels one token further on for a loss that does not
// shift (llm.c's y = buf[1:]), the input ids themselves for one that does,
// or --labels' stream; the ignore index rewritten to -100, and the divisor
// the step's labelled tokens over the replicas.
TEST(TrainBatches, EachStepReadsItsSliceAndItsLabels)
{
    tpcc_test::TempDir d;
    std::vector<int32_t> ids(2 * 2 * 3 * 2 + 1), lab(ids.size());
    for (size_t i = 0; i < ids.size(); i++) {
        ids[i] = int32_t(i % 7);
        lab[i] = i % 3 ? int32_t(i % 5) : 99;
    }
    auto file = [&](const char *name, const std::vector<int32_t> &v) {
        return d.write(name, npy("<i4", raw(v), "(" + std::to_string(v.size()) + ",)"));
    };
    const std::string data = file("ids.npy", ids), labels = file("labels.npy", lab);
    char err[600] = "";
    // 2 steps of 2 replicas x [2, 3], the labels the next tokens
    tr_batch_shape shape = {.batch = 2, .seq = 3, .replicas = 2, .micro_batches = 1, .steps = 2, .epochs = 1,
                            .shuffle = false, .shuffle_seed = 0, .label_shift = 0, .vocab = 7, .ignore_index = 6,
                            .scored = true, .any_step = false, .evaluation = false, .pad_id = -1, .eos_id = -1};
    tr_batches b;
    ASSERT_EQ(open_batches(&b, shape, data, nullptr, err, sizeof err), 0) << err;
    EXPECT_EQ(tr_batches_bytes_read(&b), 4u * 25);     // the check read each token once
    for (int64_t i = 0; i < 2; i++)
        for (int r = 0; r < 2; r++) {
            const int64_t at = (i * 2 + r) * 6;
            EXPECT_EQ(step_of(&b, i, r, false), std::vector<int32_t>(ids.begin() + at, ids.begin() + at + 6));
            const std::vector<int32_t> y = step_of(&b, i, r, true);
            for (int k = 0; k < 6; k++)    // ids[at + k + 1], the ignore index 6 as -100
                EXPECT_EQ(y[k], ids[at + k + 1] == 6 ? -100 : ids[at + k + 1]) << i << " " << r << " " << k;
        }
    // step 1's labels are ids 13..24, of which 13 and 20 hold 6, ignored
    EXPECT_EQ(tr_batches_divisor(&b, 1), (12.0 - 2.0) / 2.0);
    // then each read above of a replica's 2 rows: S + 1 tokens a row
    EXPECT_EQ(tr_batches_bytes_read(&b), 4u * (25 + 2 * 2 * 2 * 2 * 4));
    tr_batches_free(&b);
    // one token fewer: the last label has no token to be
    std::vector<int32_t> short_ids(ids.begin(), ids.end() - 1);
    const std::string cut = file("cut.npy", short_ids);
    EXPECT_EQ(open_batches(&b, shape, cut, nullptr, err, sizeof err), -1);
    EXPECT_TRUE(contains(err, "--data " + cut + ": its 24 tokens hold 1 step of 12 (2 data-parallel replicas x 6 of "
                              "batch x seq) and a token after them (the labels are the stream one token further on), "
                              "--steps asks for 2")) << err;
    tr_batches_free(&b);
    // a loss that shifts: the ids are the labels, in place; the divisor
    // counts every position but each row's last
    shape.label_shift = 1;
    shape.ignore_index = -100;
    ASSERT_EQ(open_batches(&b, shape, cut, nullptr, err, sizeof err), 0) << err;
    EXPECT_EQ(step_of(&b, 1, 1, true), std::vector<int32_t>(short_ids.begin() + 18, short_ids.begin() + 24));
    EXPECT_EQ(tr_batches_divisor(&b, 0), 2 * 2 * 2 / 2.0);
    tr_batches_free(&b);
    // a step of nothing but ignored labels: refused in training, counted as
    // none where only the whole stream's mean matters (evaluation)
    std::vector<int32_t> ignored(short_ids.size(), 99);
    const std::string all_ignored = file("ignored.npy", ignored);
    shape.ignore_index = 99;
    EXPECT_EQ(open_batches(&b, shape, cut, all_ignored.c_str(), err, sizeof err), -1);
    EXPECT_TRUE(contains(err, "step 1 has no label to score")) << err;
    tr_batches_free(&b);
    shape.any_step = true;
    ASSERT_EQ(open_batches(&b, shape, cut, all_ignored.c_str(), err, sizeof err), 0) << err;
    EXPECT_EQ(b.labelled[0], 0);
    tr_batches_free(&b);
    shape.any_step = false;
    // --labels: the stream beside the ids, 99 the ignore index
    std::vector<int32_t> short_lab(lab.begin(), lab.end() - 1);
    const std::string beside = file("beside.npy", short_lab);
    shape.ignore_index = 99;
    ASSERT_EQ(open_batches(&b, shape, cut, beside.c_str(), err, sizeof err), 0) << err;
    const std::vector<int32_t> y = step_of(&b, 0, 1, true);
    for (int k = 0; k < 6; k++)
        EXPECT_EQ(y[k], lab[6 + k] == 99 ? -100 : lab[6 + k]) << k;
    tr_batches_free(&b);
}

// Every value is checked before step 1, the tail after the last sample
// too: ids of the vocabulary (whatever their dtype holds), labels of it or
// the ignore index, attention masks and position ids as Hugging Face
// writes them and tprun reads them, every stream beside --data of its
// length; the message names the flag, the file and the position. A value
// written after the check is refused where a step reads it.
TEST(TrainBatches, ValuesOutsideTheirRulesAreRefused)
{
    TempDir d;
    std::vector<int32_t> ok(2 * 4 + 3, 1);       // 2 samples of 4, 3 tokens after them
    auto file = [&](const std::string &name, const std::string &descr, const std::string &bytes, size_t n) {
        return d.write(name, npy(descr, bytes, "(" + std::to_string(n) + ",)"));
    };
    auto ints = [&](const std::string &name, std::vector<int32_t> v) {
        return file(name, "<i4", raw(v), v.size());
    };
    tr_batch_shape shape = {.batch = 1, .seq = 4, .replicas = 1, .micro_batches = 1, .steps = 2, .epochs = 1,
                            .shuffle = false, .shuffle_seed = 0, .label_shift = 1, .vocab = 100, .ignore_index = -100,
                            .scored = true, .any_step = false, .evaluation = false, .pad_id = -1, .eos_id = -1};
    std::vector<int32_t> tail = ok, neg = ok, lab = ok, shorter(ok.begin(), ok.end() - 1);
    tail[10] = 127;
    neg[5] = -1;
    lab[6] = 100;
    struct Case { std::string data; std::string labels; std::string says; };
    const std::string data = ints("ok.npy", ok);
    const std::vector<Case> cases = {
        {ints("tail.npy", tail), "", "--data " + d.path + "/tail.npy: token 10 is 127, outside the model's vocabulary "
                                     "[0, 100); was the corpus tokenised for another model?"},
        {ints("neg.npy", neg), "", "token 5 is -1, outside"},
        {file("big.npy", "<u4", raw(std::vector<uint32_t>(11, 3000000000u)), 11), "",
         "token 0 is 3000000000, outside"},
        {data, ints("lab.npy", lab), "--labels " + d.path + "/lab.npy: label 6 is 100, neither a token of the model's "
                                     "vocabulary [0, 100) nor the ignore index -100"},
        {data, ints("short.npy", shorter), "--labels " + d.path + "/short.npy holds 10 labels and --data " + data +
                                           " 11 tokens: the labels are a stream beside the tokens, one per token"},
    };
    for (const Case &c : cases) {
        tr_batches b;
        char err[800] = "";
        EXPECT_EQ(open_batches(&b, shape, c.data, c.labels.empty() ? nullptr : c.labels.c_str(), err, sizeof err), -1);
        EXPECT_TRUE(contains(err, c.says)) << err;
        tr_batches_free(&b);
    }
    // the evaluation's streams by their flags
    shape.evaluation = true;
    tr_batches b;
    char err[800] = "";
    EXPECT_EQ(open_batches(&b, shape, data, (d.path + "/lab.npy").c_str(), err, sizeof err), -1);
    EXPECT_TRUE(contains(err, "--eval-labels " + d.path + "/lab.npy: label 6 is 100")) << err;
    tr_batches_free(&b);
    shape.evaluation = false;
    // Hugging Face's masks: an attention mask of 0 and 1; position ids that
    // start at 0 at each row (sample) and after padding, and count up by
    // one within a document
    const std::vector<int32_t> ones(ok.size(), 1), count = {0, 1, 2, 3, 0, 1, 0, 1, 0, 1, 2};
    std::vector<int32_t> two = ones, padded = ones, jump = count, row = count, far = count, after = count;
    two[7] = 2;
    padded[2] = 0;
    jump[2] = 3;
    row[4] = 3;
    far[9] = 4;
    after[3] = 3;
    const std::string mask = ints("mask.npy", ones), pos = ints("pos.npy", count);
    struct Masks { std::string mask, positions, says; };
    const std::vector<Masks> masks = {
        {ints("two.npy", two), pos, "--attention-mask " + d.path + "/two.npy: mask value 7 is 2: an attention mask "
                                    "holds 1 for a token and 0 for padding (Hugging Face's attention_mask), nothing "
                                    "else"},
        {ints("ten.npy", std::vector<int32_t>(10, 1)), pos,
         "--attention-mask " + d.path + "/ten.npy holds 10 mask values and --data " + data + " 11 tokens: the mask "
         "values are a stream beside the tokens, one per token"},
        {mask, ints("jump.npy", jump), "--position-ids " + d.path + "/jump.npy: position id 2 is 3 after 1: within a "
                                       "document positions count up by one, and a document starts at 0; write 2"},
        {mask, ints("row.npy", row), "position id 4 is 3 at the first token of a row (sample 1 of 4 tokens): each "
                                     "row starts a document, at 0"},
        {mask, ints("far.npy", far), "position id 9 is 4, outside a row of 4 tokens [0, 4)"},
        {ints("padded.npy", padded), ints("after.npy", after),
         "position id 3 is 3 at the first token after padding: tprun starts a document there, numbered from 0"},
    };
    for (const Masks &c : masks) {
        EXPECT_EQ(open_batches(&b, shape, data, nullptr, err, sizeof err, c.mask.c_str(), c.positions.c_str()), -1);
        EXPECT_TRUE(contains(err, c.says)) << err;
        tr_batches_free(&b);
    }
    // kept: the segments from the streams (a padding's position id is
    // free; after it a document starts)
    std::vector<int32_t> free_id = count;
    free_id[2] = 3;
    free_id[3] = 0;
    ASSERT_EQ(open_batches(&b, shape, data, nullptr, err, sizeof err, (d.path + "/padded.npy").c_str(),
                           ints("free.npy", free_id).c_str()), 0) << err;
    ASSERT_EQ(tr_batches_read(&b, 1, 0, 0, err, sizeof err), 0) << err;
    EXPECT_EQ(std::vector<int32_t>(b.step_segments, b.step_segments + 4), (std::vector<int32_t>{0, 0, 1, 1}));
    ASSERT_EQ(tr_batches_read(&b, 0, 0, 0, err, sizeof err), 0) << err;
    EXPECT_EQ(std::vector<int32_t>(b.step_segments, b.step_segments + 4), (std::vector<int32_t>{0, 0, -1, 1}));
    tr_batches_free(&b);
    // checked, then rewritten: step 2 reads what is there now
    const std::string later = ints("later.npy", ok);
    ASSERT_EQ(open_batches(&b, shape, later, nullptr, err, sizeof err), 0) << err;
    std::vector<int32_t> bad = ok;
    bad[6] = 100;
    ints("later.npy", bad);
    EXPECT_EQ(tr_batches_read(&b, 1, 0, 0, err, sizeof err), -1);
    EXPECT_TRUE(contains(err, "token 6 is 100, outside")) << err;
    tr_batches_free(&b);
}

// Samples (rows of seq tokens) in epochs: without a seed each epoch reads
// the stream's order again; with one, each epoch a permutation drawn from
// the seed and the epoch, every sample once, the same for the same seed,
// another for another epoch; steps 0 asks for every step the epochs hold
// (whole steps: the odd sample is left, as drop_last).
TEST(TrainBatches, EpochsVisitEverySampleOnceInASeededOrder)
{
    tpcc_test::TempDir d;
    std::vector<int32_t> ids(9 * 4);            // 9 samples of 4, sample k all k
    for (size_t i = 0; i < ids.size(); i++)
        ids[i] = int32_t(i / 4);
    const std::string data = d.write("ids.npy", npy("<i4", raw(ids), "(36,)"));
    char err[600] = "";
    auto samples_of = [&](bool shuffle, uint64_t seed, int64_t epochs) {
        tr_batch_shape shape = {.batch = 2, .seq = 4, .replicas = 1, .micro_batches = 1, .steps = 0,
                                .epochs = epochs, .shuffle = shuffle, .shuffle_seed = seed, .label_shift = 1,
                                .vocab = 9, .ignore_index = -100, .scored = true, .any_step = false,
                                .evaluation = false, .pad_id = -1, .eos_id = -1};
        tr_batches b;
        std::vector<int> seen;
        EXPECT_EQ(open_batches(&b, shape, data, nullptr, err, sizeof err), 0) << err;
        EXPECT_EQ(b.steps, 4 * epochs);         // 9 samples: 4 steps of 2 an epoch
        for (int64_t i = 0; i < b.steps; i++) {
            const std::vector<int32_t> x = step_of(&b, i, 0, false);
            seen.push_back(x[0]);
            seen.push_back(x[4]);
        }
        tr_batches_free(&b);
        return seen;
    };
    EXPECT_EQ(samples_of(false, 0, 2), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7}));
    const std::vector<int> a = samples_of(true, 7, 2), again = samples_of(true, 7, 2), other = samples_of(true, 8, 2);
    EXPECT_EQ(a, again);
    EXPECT_NE(a, other);
    const std::vector<int> first(a.begin(), a.begin() + 8), second(a.begin() + 8, a.end());
    EXPECT_NE(first, second);
    for (const std::vector<int> &epoch : {first, second})
        EXPECT_EQ(std::set<int>(epoch.begin(), epoch.end()).size(), 8u);   // 8 of the 9, none twice
}

// Which parameters take AdamW's weight decay: those of rank 2 or more, or
// every one (decay_all), or every one whose name holds none of --no-decay's
// parts (transformers' Trainer: "bias" and the norms by name).
TEST(TrainOptim, WeightDecayByRankAllOrName)
{
    char qn[] = "model.layers.0.self_attn.q_proj.weight", nn[] = "model.layers.0.input_layernorm.weight",
         bn[] = "model.layers.0.self_attn.q_proj.bias";
    tr_weight q = {}, norm = {}, bias = {};
    q.name = qn;
    norm.name = nn;
    bias.name = bn;
    q.rank = 2;
    norm.rank = bias.rank = 1;
    tr_adamw_hparams h = {};
    EXPECT_TRUE(tr_adamw_decays(&h, &q));
    EXPECT_FALSE(tr_adamw_decays(&h, &norm));
    h.decay_all = true;
    EXPECT_TRUE(tr_adamw_decays(&h, &norm));
    h = {};
    h.no_decay = "bias,layernorm";
    EXPECT_TRUE(tr_adamw_decays(&h, &q));
    EXPECT_FALSE(tr_adamw_decays(&h, &norm));
    EXPECT_FALSE(tr_adamw_decays(&h, &bias));
    h.no_decay = "q_proj";                  // a matrix excluded, the norm decayed
    EXPECT_FALSE(tr_adamw_decays(&h, &q));
    EXPECT_TRUE(tr_adamw_decays(&h, &norm));
    h.no_decay = ",,norm,";                 // empty parts name nothing
    EXPECT_TRUE(tr_adamw_decays(&h, &q));
    EXPECT_FALSE(tr_adamw_decays(&h, &norm));
}

double lambda(tp_lr_schedule kind, int64_t i, int64_t warmup, int64_t total, double start = 0, double floor = 0)
{
    const tr_lr_shape shape = {kind, warmup, total, start, floor, 0, TP_DECAY_COSINE};
    return tr_lr_lambda(&shape, i);
}

// transformers.get_cosine_schedule_with_warmup(opt, W, N) and
// get_constant_schedule_with_warmup(opt, W): the factor LambdaLR gives
// step i, worked out by hand for W = 4, N = 20.
TEST(TrainLr, CosineAndConstantWithWarmupAsTransformers)
{
    const double pi = 3.14159265358979323846;
    struct Row {
        int64_t i;
        double cosine, constant;
    } rows[] = {
        {0, 0.0, 0.0},
        {1, 0.25, 0.25},
        {3, 0.75, 0.75},
        {4, 1.0, 1.0},                                        // progress 0
        {8, 0.5 * (1 + std::cos(pi * 4.0 / 16.0)), 1.0},      // progress 1/4: 0.853553...
        {12, 0.5, 1.0},                                       // progress 1/2
        {19, 0.5 * (1 + std::cos(pi * 15.0 / 16.0)), 1.0},    // 0.009607...
        {20, 0.0, 1.0},
        // past the end transformers' cosine rises again (max(0, .) clamps
        // negatives only); tprun never asks for a step beyond N
        {30, 0.5 * (1 + std::cos(pi * 26.0 / 16.0)), 1.0},
    };
    for (const Row &r : rows) {
        EXPECT_NEAR(lambda(TP_LR_COSINE, r.i, 4, 20), r.cosine, 1e-15) << "step " << r.i;
        EXPECT_NEAR(lambda(TP_LR_CONSTANT, r.i, 4, 20), r.constant, 1e-15) << "step " << r.i;
    }
    EXPECT_NEAR(lambda(TP_LR_COSINE, 8, 4, 20), 0.8535533905932737, 1e-15);
    // no warm-up: the first step at the full rate; max(1, N - W) for one step
    EXPECT_EQ(lambda(TP_LR_COSINE, 0, 0, 10), 1.0);
    EXPECT_EQ(lambda(TP_LR_COSINE, 0, 0, 1), 1.0);
    EXPECT_NEAR(lambda(TP_LR_COSINE, 5, 0, 10), 0.5, 1e-15);
}

// PyTorch's SequentialLR of LinearLR(start_factor=F, total_iters=W) and
// CosineAnnealingLR(T_max=N - W, eta_min=m lr), by hand for W = 4, N = 20,
// F = 0.1, m = 0.1 (the run against PyTorch's own schedulers is
// TrainRun.MatchesPyTorchsRecipe).
TEST(TrainLr, WarmupStartFactorAndCosineFloorAsPyTorch)
{
    EXPECT_NEAR(lambda(TP_LR_COSINE, 0, 4, 20, 0.1, 0.1), 0.1, 1e-15);
    EXPECT_NEAR(lambda(TP_LR_COSINE, 2, 4, 20, 0.1, 0.1), 0.55, 1e-15);
    EXPECT_NEAR(lambda(TP_LR_COSINE, 4, 4, 20, 0.1, 0.1), 1.0, 1e-15);
    EXPECT_NEAR(lambda(TP_LR_COSINE, 12, 4, 20, 0.1, 0.1), 0.55, 1e-15);
    EXPECT_NEAR(lambda(TP_LR_COSINE, 20, 4, 20, 0.1, 0.1), 0.1, 1e-15);
    EXPECT_NEAR(lambda(TP_LR_CONSTANT, 1, 4, 20, 0.1, 0.1), 0.325, 1e-15);   // the floor is the cosine's
    EXPECT_NEAR(lambda(TP_LR_CONSTANT, 9, 4, 20, 0.1, 0.1), 1.0, 1e-15);
}

// transformers.get_linear_schedule_with_warmup(opt, 4, 20), as its
// LambdaLR gave them (0.0, 0.5, 1.0, 0.75, 0.5, 0.0625, 0.0, 0.0), and
// with a floor m it falls to m instead of 0.
TEST(TrainLr, LinearDecayAsTransformers)
{
    const std::pair<int64_t, double> rows[] = {{0, 0.0},  {2, 0.5},     {4, 1.0},  {8, 0.75},
                                               {12, 0.5}, {19, 0.0625}, {20, 0.0}, {21, 0.0}};
    for (const auto &[i, want] : rows)
        EXPECT_NEAR(lambda(TP_LR_LINEAR, i, 4, 20), want, 1e-15) << "step " << i;
    EXPECT_NEAR(lambda(TP_LR_LINEAR, 12, 4, 20, 0.0, 0.2), 0.6, 1e-15);
    EXPECT_NEAR(lambda(TP_LR_LINEAR, 20, 4, 20, 0.0, 0.2), 0.2, 1e-15);
    tr_train_options t = tr_train_defaults();
    char err[200];
    EXPECT_EQ(tr_train_option(&t, "schedule", "linear", err, sizeof err), 0);
    EXPECT_EQ(t.schedule, TP_LR_LINEAR);
}

// Each case of tests/fixtures/train/lr_schedules.json (tools/
// lr_schedule_fixture.py): the factors transformers' get_wsd_schedule (each
// decay_type, with and without min_lr_ratio and warm-up) and the
// schedulers tprun had before applied, step by step, against tprun's
// rates from the same flags at --lr 1. wsd's warm-up starts from its floor
// as get_wsd_schedule's does.
TEST(TrainLr, SchedulesAsTransformers)
{
    json_error_t e;
    json_t *ref = json_load_file((std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/train/lr_schedules.json").c_str(),
                                 0, &e);
    ASSERT_TRUE(ref) << e.text;
    json_t *cases = json_object_get(ref, "cases"), *c;
    size_t n, wsd = 0;
    json_array_foreach(cases, n, c) {
        tr_train_options flags = tr_train_defaults();
        char err[300] = "";
        const char *key;
        json_t *v;
        json_object_foreach(c, key, v) {
            std::string flag = !strcmp(key, "decay_steps") ? "decay-steps" : !strcmp(key, "decay_type") ? "decay-type"
                               : !strcmp(key, "min_lr") ? "min-lr" : key;
            char arg[40];
            if (json_is_string(v))
                snprintf(arg, sizeof arg, "%s", json_string_value(v));
            else if (json_is_integer(v))
                snprintf(arg, sizeof arg, "%lld", (long long)json_integer_value(v));
            else if (json_is_real(v))
                snprintf(arg, sizeof arg, "%.17g", json_real_value(v));
            else
                continue;   // the factors
            ASSERT_EQ(tr_train_option(&flags, flag.c_str(), arg, err, sizeof err), 0) << err;
        }
        tr_train_options t;
        const tp_train_values none = {};
        ASSERT_EQ(tr_train_in_force(&flags, &none, &t, err, sizeof err), 0) << err;
        wsd += t.schedule == TP_LR_WSD;
        const tr_lr_shape shape = tr_train_lr_shape(&t);
        json_t *factors = json_object_get(c, "factors");
        ASSERT_EQ(json_array_size(factors), size_t(t.steps));
        for (int64_t i = 0; i < t.steps; i++)
            EXPECT_NEAR(t.lr * tr_lr_lambda(&shape, i), json_number_value(json_array_get(factors, size_t(i))), 1e-12)
                << "case " << n << " step " << i;
    }
    EXPECT_EQ(json_array_size(cases), 11u);
    EXPECT_EQ(wsd, 7u);
    json_decref(ref);
}

// The plan's train { } settings (the schedule's "train") are the defaults:
// a flag overrides its own value only (--adam-beta2 leaves the plan's
// beta1); what contradicts itself is refused naming where each value
// comes from.
TEST(TrainSettings, ThePlansAreDefaultsEachFlagOverrides)
{
    tp_train_values plan = {};
    auto give = [&](tp_train_field f, double v) {
        plan.v[f] = v;
        plan.given |= 1u << f;
    };
    give(TP_TF_LR, 3e-4);
    give(TP_TF_BETA1, 0.8);
    give(TP_TF_BETA2, 0.95);
    give(TP_TF_DECAY_ALL, 1);
    give(TP_TF_MAX_GRAD_NORM, 0.5);
    give(TP_TF_SCHEDULE, TP_LR_WSD);
    give(TP_TF_WARMUP_STEPS, 2);
    give(TP_TF_MIN_LR, 3e-5);
    give(TP_TF_DECAY_STEPS, 4);
    give(TP_TF_DECAY_TYPE, TP_DECAY_1_SQRT);
    tr_train_options flags = tr_train_defaults(), t;
    char err[400] = "";
    for (auto [name, arg] : {std::pair{"steps", "10"}, {"adam-beta2", "0.99"}, {"max-grad-norm", "2"}})
        ASSERT_EQ(tr_train_option(&flags, name, arg, err, sizeof err), 0) << err;
    ASSERT_EQ(tr_train_in_force(&flags, &plan, &t, err, sizeof err), 0) << err;
    EXPECT_EQ(t.lr, 3e-4);
    EXPECT_EQ(t.adam_beta1, 0.8);
    EXPECT_EQ(t.adam_beta2, 0.99);
    EXPECT_EQ(t.adam_epsilon, 1e-8);          // tprun's default
    EXPECT_TRUE(t.decay_all);
    EXPECT_EQ(t.max_grad_norm, 2.0);
    EXPECT_EQ(t.schedule, TP_LR_WSD);
    EXPECT_EQ(t.warmup, 2);
    EXPECT_EQ(t.decay_steps, 4);
    EXPECT_EQ(t.decay_type, TP_DECAY_1_SQRT);
    EXPECT_NEAR(t.warmup_start_factor, 0.1, 1e-15);   // min_lr_ratio, as get_wsd_schedule warms up
    ASSERT_EQ(tr_train_option(&flags, "warmup-start-factor", "0", err, sizeof err), 0);
    ASSERT_EQ(tr_train_in_force(&flags, &plan, &t, err, sizeof err), 0) << err;
    EXPECT_EQ(t.warmup_start_factor, 0.0);    // given: kept

    struct Bad {
        std::vector<std::pair<const char *, const char *>> flags;
        const char *expect;
    } bad[] = {
        {{{"lr", "1e-5"}}, "the plan's min_lr 3e-05 is above --lr 1e-05: the schedule decays from the peak rate"},
        {{{"steps", "5"}}, "the plan's warmup_steps 2 and the plan's decay_steps 4 take more steps than --steps 5"},
        {{{"decay-steps", "9"}}, "the plan's warmup_steps 2 and --decay-steps 9 take more steps than --steps 10"},
        {{{"schedule", "cosine"}, {"decay-type", "linear"}},
         "--decay-type shapes the decay of --schedule wsd (warmup-stable-decay); the schedule in force is cosine"},
    };
    for (const Bad &b : bad) {
        tr_train_options f = flags;
        for (auto [name, arg] : b.flags)
            ASSERT_EQ(tr_train_option(&f, name, arg, err, sizeof err), 0) << err;
        EXPECT_EQ(tr_train_in_force(&f, &plan, &t, err, sizeof err), -1) << b.expect;
        EXPECT_TRUE(contains(err, b.expect)) << err;
    }
    // wsd with no decay steps on the command line or in the plan
    const tp_train_values none = {};
    tr_train_options f = tr_train_defaults();
    ASSERT_EQ(tr_train_option(&f, "schedule", "wsd", err, sizeof err), 0);
    ASSERT_EQ(tr_train_option(&f, "steps", "10", err, sizeof err), 0);
    EXPECT_EQ(tr_train_in_force(&f, &none, &t, err, sizeof err), -1);
    EXPECT_TRUE(contains(err, "--schedule wsd needs --decay-steps N")) << err;
}

// The data keys and no_decay of the plan's train { } are defaults too:
// each flag overrides its own, --decay-all the plan's no_decay and
// --no-decay the plan's decay_all (one of the two is in force).
TEST(TrainSettings, DataKeysAndNoDecayFromThePlan)
{
    tp_train_values plan = {};
    auto give = [&](tp_train_field f, double v) {
        plan.v[f] = v;
        plan.given |= 1u << f;
    };
    give(TP_TF_IGNORE_INDEX, 0);
    give(TP_TF_PAD_ID, 0);
    give(TP_TF_EOS_ID, 2);
    give(TP_TF_NO_DECAY, 1);
    ASSERT_TRUE(tp_train_names_add(plan.no_decay, "bias"));
    ASSERT_TRUE(tp_train_names_add(plan.no_decay, "norm"));
    tr_train_options flags = tr_train_defaults(), t;
    char err[400] = "";
    ASSERT_EQ(tr_train_in_force(&flags, &plan, &t, err, sizeof err), 0) << err;
    EXPECT_EQ(t.ignore_index, 0);
    EXPECT_EQ(t.pad_id, 0);
    EXPECT_EQ(t.eos_id, 2);
    EXPECT_STREQ(t.no_decay, "bias,norm");
    for (auto [name, arg] : {std::pair{"ignore-index", "-100"}, {"pad-id", "5"}, {"decay-all", nullptr}})
        ASSERT_EQ(tr_train_option(&flags, name, arg, err, sizeof err), 0) << err;
    ASSERT_EQ(tr_train_in_force(&flags, &plan, &t, err, sizeof err), 0) << err;
    EXPECT_EQ(t.ignore_index, -100);
    EXPECT_EQ(t.pad_id, 5);
    EXPECT_EQ(t.eos_id, 2);
    EXPECT_TRUE(t.decay_all);
    EXPECT_EQ(t.no_decay, nullptr);
    give(TP_TF_DECAY_ALL, 1);
    flags = tr_train_defaults();
    ASSERT_EQ(tr_train_option(&flags, "no-decay", "norm", err, sizeof err), 0) << err;
    ASSERT_EQ(tr_train_in_force(&flags, &plan, &t, err, sizeof err), 0) << err;
    EXPECT_FALSE(t.decay_all);
    EXPECT_STREQ(t.no_decay, "norm");
    // names that do not fit the schedule's string are refused, not cut
    char names[TP_TRAIN_NAMES_MAX] = "";
    const std::string long_name(TP_TRAIN_NAMES_MAX / 2, 'n');
    EXPECT_TRUE(tp_train_names_add(names, long_name.c_str()));
    EXPECT_FALSE(tp_train_names_add(names, long_name.c_str()));
    EXPECT_EQ(std::string(names), long_name);
    EXPECT_FALSE(tp_train_name_ok(""));
    EXPECT_FALSE(tp_train_name_ok("bias,norm"));
}

TEST(TrainOptions, ParsedAndRefused)
{
    tr_train_options t = tr_train_defaults();
    EXPECT_EQ(t.lr, 1e-3);
    EXPECT_EQ(t.weight_decay, 0.01);
    EXPECT_EQ(t.max_grad_norm, 1.0);
    EXPECT_EQ(t.schedule, TP_LR_COSINE);
    // torch.optim.AdamW's and transformers' defaults
    EXPECT_EQ(t.adam_beta1, 0.9);
    EXPECT_EQ(t.adam_beta2, 0.999);
    EXPECT_EQ(t.adam_epsilon, 1e-8);
    EXPECT_EQ(t.warmup_start_factor, 0.0);
    EXPECT_EQ(t.min_lr, 0.0);
    char err[300];
    EXPECT_EQ(tr_train_option(&t, "adam-beta2", "0.99", err, sizeof err), 0);
    EXPECT_EQ(tr_train_option(&t, "adam-epsilon", "1e-6", err, sizeof err), 0);
    EXPECT_EQ(tr_train_option(&t, "warmup-start-factor", "1", err, sizeof err), 0);
    EXPECT_EQ(tr_train_option(&t, "min-lr", "1e-5", err, sizeof err), 0);
    EXPECT_EQ(t.adam_beta2, 0.99);
    EXPECT_EQ(t.adam_epsilon, 1e-6);
    EXPECT_EQ(t.warmup_start_factor, 1.0);
    EXPECT_EQ(t.min_lr, 1e-5);
    EXPECT_EQ(tr_train_option(&t, "steps", "20", err, sizeof err), 0);
    EXPECT_EQ(tr_train_option(&t, "lr", "3e-4", err, sizeof err), 0);
    EXPECT_EQ(tr_train_option(&t, "schedule", "constant", err, sizeof err), 0);
    EXPECT_EQ(tr_train_option(&t, "max-grad-norm", "0", err, sizeof err), 0);
    EXPECT_EQ(tr_train_option(&t, "decay-all", nullptr, err, sizeof err), 0);
    EXPECT_EQ(t.steps, 20);
    EXPECT_EQ(t.lr, 3e-4);
    EXPECT_EQ(t.schedule, TP_LR_CONSTANT);
    EXPECT_EQ(t.max_grad_norm, 0.0);
    EXPECT_TRUE(t.decay_all);
    struct Bad {
        const char *name, *arg, *expect;
    } bad[] = {
        {"steps", "0", "--steps takes a whole number of steps of at least 1, not '0'"},
        {"steps", "3x", "not '3x'"},
        {"warmup", "-1", "--warmup takes"},
        {"lr", "-1e-3", "--lr takes a non-negative decimal number"},
        {"lr", "nan", "--lr takes"},
        // decimal only: strtod alone reads hex, infinities and blanks
        {"lr", "0x10", "--lr takes a non-negative decimal number, not '0x10'"},
        {"lr", "inf", "not 'inf'"},
        {"lr", " 1e-3", "not ' 1e-3'"},
        {"lr", "+1e-3", "not '+1e-3'"},
        {"lr", "1e999", "not '1e999'"},
        {"weight-decay", "1e", "not '1e'"},
        {"steps", " 5", "not ' 5'"},
        {"steps", "+5", "not '+5'"},
        {"steps", "99999999999999999999", "not '99999999999999999999'"},
        {"schedule", "exponential", "--schedule takes cosine, constant, linear or wsd, not 'exponential'"},
        {"decay-type", "sqrt", "--decay-type takes linear, cosine or 1-sqrt, not 'sqrt'"},
        {"decay-steps", "-1", "--decay-steps takes a whole number of steps of at least 0, not '-1'"},
        // torch.optim.AdamW raises ValueError for a beta outside [0, 1)
        {"adam-beta1", "1", "--adam-beta1 takes a decimal number from 0 to 1 (excluded), not '1'"},
        {"adam-beta2", "-0.1", "not '-0.1'"},
        {"adam-epsilon", "-1e-8", "--adam-epsilon takes a non-negative decimal number"},
        {"warmup-start-factor", "1.5", "--warmup-start-factor takes a decimal number from 0 to 1 (included)"},
        {"min-lr", "nan", "--min-lr takes"},
        // a size's number is decimal as any real is
        {"max-shard-size", "0x10GB", "--max-shard-size takes a size such as 2GiB, 5GB or 500MB, not '0x10GB'"},
        {"max-shard-size", "+2GB", "not '+2GB'"},
        {"max-shard-size", " 2GB", "not ' 2GB'"},
        {"max-shard-size", "infGB", "not 'infGB'"},
    };
    for (const Bad &b : bad) {
        EXPECT_EQ(tr_train_option(&t, b.name, b.arg, err, sizeof err), -1) << b.name << " " << b.arg;
        EXPECT_TRUE(contains(err, b.expect)) << err;
    }
}

TEST(SafetensorsWrite, RoundTripsThroughTheCheckpointReader)
{
    TempDir d;
    std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {-0.5f, 0.25f, 1e-30f}, empty;
    // given out of order: the file holds them sorted
    tp_st_tensor t[3] = {{"z.weight", 2, {2, 3}, a.data()}, {"a.bias", 1, {3}, b.data()},
                         {"m.empty", 2, {0, 4}, empty.data()}};
    std::string path = d.path + "/g.safetensors";
    char err[400] = "";
    ASSERT_EQ(tp_safetensors_write(path.c_str(), t, 3, err, sizeof err), 0) << err;

    std::string bytes = tpcc_test::slurp(path);
    uint64_t hlen = 0;
    std::memcpy(&hlen, bytes.data(), 8);
    EXPECT_EQ(hlen % 8, 0u);
    std::string header = bytes.substr(8, hlen);
    EXPECT_EQ(header.rfind("{\"__metadata__\":{\"format\":\"pt\"},\"a.bias\":{\"data_offsets\":[0,12],"
                           "\"dtype\":\"F32\",\"shape\":[3]},\"m.empty\":{\"data_offsets\":[12,12],",
                           0),
              0u)
        << header;
    EXPECT_EQ(bytes.size(), 8 + hlen + 36);

    tp_checkpoint *c;
    ASSERT_EQ(tp_checkpoint_open(&c, path.c_str(), err, sizeof err), 0) << err;
    EXPECT_EQ(tp_checkpoint_num_tensors(c), 3u);
    std::vector<float> got(6);
    tp_weight_slice whole = {"z.weight", 0, {2, 3}, {0, 0}, -1, 0, 0, 2};
    ASSERT_EQ(tp_checkpoint_read(c, &whole, got.data(), err, sizeof err), 0) << err;
    EXPECT_EQ(got, a);
    tp_weight_slice bias = {"a.bias", 0, {3, 0}, {0, 0}, -1, 0, 0, 1};
    ASSERT_EQ(tp_checkpoint_read(c, &bias, got.data(), err, sizeof err), 0) << err;
    EXPECT_EQ(std::vector<float>(got.begin(), got.begin() + 3), b);
    const char *dtype;
    int ndim;
    int64_t shape[8];
    ASSERT_EQ(tp_checkpoint_tensor_info(c, "m.empty", &dtype, &ndim, shape), 0);
    EXPECT_STREQ(dtype, "F32");
    EXPECT_EQ(ndim, 2);
    EXPECT_EQ(shape[1], 4);
    tp_checkpoint_close(c);
}

TEST(SafetensorsWrite, DuplicateNamesAreRefusedAndNothingIsWritten)
{
    TempDir d;
    std::vector<float> a = {1};
    tp_st_tensor t[2] = {{"w", 1, {1}, a.data()}, {"w", 1, {1}, a.data()}};
    std::string path = d.path + "/dup.safetensors";
    char err[400] = "";
    EXPECT_EQ(tp_safetensors_write(path.c_str(), t, 2, err, sizeof err), -1);
    EXPECT_TRUE(contains(err, "tensor 'w': the name is taken twice")) << err;
    EXPECT_FALSE(std::ifstream(path).good());
}

using tpcc_test::kTprun;

TEST(TrainCli, TrainingOptionsNeedATrainingSchedule)
{
    TempDir d;
    std::string sched = d.path + "/fwd.sched";
    tpcc_test::Proc c = tpcc_test::run_tpcc({std::string(TPCC_SOURCE_DIR) + "/plans/llama-tiny.plan", "-o", sched});
    ASSERT_EQ(c.code(), 0) << c.describe();
    std::string data = d.write("t.npy", npy("<i4", raw(kIds), "(6,)"));
    tpcc_test::Proc r = tpcc_test::run_program(kTprun, {sched, "--data", data, "--steps", "2"});
    EXPECT_NE(r.code(), 0);
    EXPECT_TRUE(contains(r.err, "is a forward schedule: --data, --steps and the other training options go with a "
                                "schedule compiled with tpcc PLAN --train")) << r.describe();
    tpcc_test::Proc bad = tpcc_test::run_program(kTprun, {sched, "--schedule", "exponential"});
    EXPECT_EQ(bad.code(), 2);
    EXPECT_TRUE(contains(bad.err, "tprun: --schedule takes cosine, constant, linear or wsd, not 'exponential'")) << bad.describe();
}

// --repeat repeats a forward step; training counts its steps with --steps.
TEST(TrainCli, RepeatIsRefusedForTraining)
{
    TempDir d;
    std::string sched = d.path + "/train.sched";
    tpcc_test::Proc c =
        tpcc_test::run_tpcc({std::string(TPCC_SOURCE_DIR) + "/plans/llama-tiny.plan", "--train", "-o", sched});
    ASSERT_EQ(c.code(), 0) << c.describe();
    std::string data = d.write("t.npy", npy("<i4", raw(kIds), "(6,)"));
    tpcc_test::Proc r = tpcc_test::run_program(kTprun, {sched, "--data", data, "--steps", "2", "--repeat", "3"});
    EXPECT_EQ(r.code(), 1);
    EXPECT_TRUE(contains(r.err, "is a training schedule: --repeat repeats a forward step; a training run takes "
                                "--steps N")) << r.describe();
}

// The step line: on a terminal one line rewritten in place (a carriage
// return first, the rest of the old line erased, a newline after the
// last step); elsewhere a line per step, as a log file wants.
TEST(TrainLog, ProgressLineOnATerminalALinePerStepElsewhere)
{
    for (bool tty : {true, false}) {
        char *buf = nullptr;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        ASSERT_TRUE(f);
        for (int64_t step = 1; step <= 2; step++) {
            tr_step_record r = {step, 5.25, 1e-3, 0.5, 0.25, false, false, 0.0};
            tr_log_print(f, tty, &r, 2, 1000);
        }
        ASSERT_EQ(fclose(f), 0);
        std::string out(buf, len);
        free(buf);
        const std::string line = "  loss 5.2500  lr 1.00e-03  grad_norm 0.500  4000 tok/s  250.0 ms";
        if (tty)
            EXPECT_EQ(out, "\rstep 1/2" + line + "\033[K\rstep 2/2" + line + "\n");
        else
            EXPECT_EQ(out, "step 1/2" + line + "\nstep 2/2" + line + "\n");
    }
}

// A step --on-nonfinite skip dropped says so, and keeps its own line on
// a terminal: the next step's line does not rewrite it.
TEST(TrainLog, ASkippedStepSaysSoOnALineOfItsOwn)
{
    char *buf = nullptr;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ASSERT_TRUE(f);
    tr_step_record r = {1, NAN, 1e-3, NAN, 0.25, true, false, 0.0};
    tr_log_print(f, true, &r, 2, 1000);
    ASSERT_EQ(fclose(f), 0);
    EXPECT_EQ(std::string(buf, len),
              "\rstep 1/2  loss nan  lr 1.00e-03  grad_norm nan  4000 tok/s  250.0 ms  skipped (not finite)\n");
    free(buf);
}

TEST(SafetensorsWrite, ShardedWithAnIndexAboveTheShardSize)
{
    TempDir d;
    std::vector<float> a(10, 1.5f), b(6, -2.0f), c(3, 4.0f);
    tp_st_tensor t[3] = {{"b", 1, {6}, b.data()}, {"a", 2, {2, 5}, a.data()}, {"c", 1, {3}, c.data()}};
    char err[400] = "";
    // 40 + 24 bytes fit a 64-byte shard, c's 12 go to a second file
    ASSERT_EQ(tp_safetensors_write_sharded(d.path.c_str(), t, 3, 64, err, sizeof err), 0) << err;
    std::string index = tpcc_test::slurp(d.path + "/model.safetensors.index.json");
    EXPECT_TRUE(contains(index, "\"total_size\": 76")) << index;
    EXPECT_TRUE(contains(index, "\"a\": \"model-00001-of-00002.safetensors\"")) << index;
    EXPECT_TRUE(contains(index, "\"c\": \"model-00002-of-00002.safetensors\"")) << index;
    tp_checkpoint *ck;
    ASSERT_EQ(tp_checkpoint_open(&ck, d.path.c_str(), err, sizeof err), 0) << err;
    std::vector<float> got(3);
    tp_weight_slice cs = {"c", 0, {3, 0}, {0, 0}, -1, 0, 0, 1};
    ASSERT_EQ(tp_checkpoint_read(ck, &cs, got.data(), err, sizeof err), 0) << err;
    EXPECT_EQ(got, c);
    tp_checkpoint_close(ck);

    TempDir one;   // at or under the size: one model.safetensors, no index
    ASSERT_EQ(tp_safetensors_write_sharded(one.path.c_str(), t, 3, 76, err, sizeof err), 0) << err;
    EXPECT_TRUE(std::ifstream(one.path + "/model.safetensors").good());
    EXPECT_FALSE(std::ifstream(one.path + "/model.safetensors.index.json").good());
}

// --save streams its files a tensor at a time, in the schedule's order:
// the bytes are those of one write in name order, shards and all, and a
// file missing a tensor is refused and leaves nothing behind.
TEST(SafetensorsWrite, StreamedInAnyOrderTheBytesOfOneWrite)
{
    TempDir d;
    std::vector<float> a(10, 1.5f), b(6, -2.0f), c(3, 4.0f);
    tp_st_tensor t[3] = {{"b", 1, {6}, b.data()}, {"a", 2, {2, 5}, a.data()}, {"c", 1, {3}, c.data()}};
    char err[400] = "";
    std::string once = d.path + "/once.safetensors", streamed = d.path + "/streamed.safetensors";
    ASSERT_EQ(tp_safetensors_write(once.c_str(), t, 3, err, sizeof err), 0) << err;
    tp_st_file *f;
    ASSERT_EQ(tp_st_file_create(&f, streamed.c_str(), t, 3, err, sizeof err), 0) << err;
    EXPECT_FALSE(std::ifstream(streamed).good());   // renamed into place at the end only
    for (int i : {2, 0, 1})
        ASSERT_EQ(tp_st_file_put(f, i, t[i].data, err, sizeof err), 0) << err;
    ASSERT_EQ(tp_st_file_finish(f, err, sizeof err), 0) << err;
    EXPECT_EQ(tpcc_test::slurp(streamed), tpcc_test::slurp(once));

    TempDir shards;   // c alone in the second shard, the first a and b
    tp_st_model *m;
    ASSERT_EQ(tp_st_model_create(&m, shards.path.c_str(), t, 3, 64, err, sizeof err), 0) << err;
    for (int i : {2, 1, 0})
        ASSERT_EQ(tp_st_model_put(m, i, t[i].data, err, sizeof err), 0) << err;
    ASSERT_EQ(tp_st_model_finish(m, err, sizeof err), 0) << err;
    ASSERT_EQ(tp_safetensors_write(once.c_str(), t, 2, err, sizeof err), 0) << err;
    EXPECT_EQ(tpcc_test::slurp(shards.path + "/model-00001-of-00002.safetensors"), tpcc_test::slurp(once));
    ASSERT_EQ(tp_safetensors_write(once.c_str(), t + 2, 1, err, sizeof err), 0) << err;
    EXPECT_EQ(tpcc_test::slurp(shards.path + "/model-00002-of-00002.safetensors"), tpcc_test::slurp(once));

    std::string part = d.path + "/part.safetensors";
    ASSERT_EQ(tp_st_file_create(&f, part.c_str(), t, 3, err, sizeof err), 0) << err;
    ASSERT_EQ(tp_st_file_put(f, 0, t[0].data, err, sizeof err), 0) << err;
    EXPECT_EQ(tp_st_file_finish(f, err, sizeof err), -1);
    EXPECT_TRUE(contains(err, "2 of its 3 tensors were never given")) << err;
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(d.path), {}), 2);   // once and streamed
}

TEST(TrainSave, RefusedBeforeTrainingWithoutAConfigOrOverAFile)
{
    TempDir d;
    char *config = nullptr, *dest = nullptr;
    char err[600] = "";
    auto check = [&](const std::string &dir, const char *weights) {
        free(dest);
        free(config);
        return tr_save_check(dir.c_str(), weights, &dest, &config, err, sizeof err);
    };
    std::string file = d.write("file", "x");
    EXPECT_EQ(check(file, d.path.c_str()), -1);
    EXPECT_TRUE(contains(err, "exists and is not a directory")) << err;
    std::string out = d.path + "/out";
    EXPECT_EQ(check(out, nullptr), -1);
    EXPECT_TRUE(contains(err, "pass --weights DIR of a Hugging Face checkpoint")) << err;
    EXPECT_EQ(check(out, d.path.c_str()), -1);
    EXPECT_TRUE(contains(err, "no config.json beside --weights")) << err;
    d.write("config.json", "{}");
    ASSERT_EQ(check(out, d.path.c_str()), 0) << err;
    EXPECT_EQ(std::string(config), "{}");
    EXPECT_EQ(std::string(dest), out);
    // a weights file: the config.json beside it
    ASSERT_EQ(check(out, file.c_str()), 0) << err;
    EXPECT_EQ(std::string(config), "{}");
    free(dest);
    free(config);
    dest = config = nullptr;
}

// A two-rank gather inside one process: rank 0's view, with rank 1's
// bytes supplied by the test.
const void *g_rank1_bytes;

int fake_gather(tp_comm *, void *out, const void *in, size_t bytes, char *, size_t)
{
    std::memcpy(out, in, bytes);
    std::memcpy(static_cast<char *>(out) + bytes, g_rank1_bytes, bytes);
    return 0;
}

// Each rank's region filled with its seeded slices (tp_weight_init_seeded:
// any slice equals the same region of the full tensor, padding zero).
std::vector<float> seeded_region(const tr_schedule &s)
{
    std::vector<float> region(size_t(s.weight_elems));
    for (int i = 0; i < s.nweights; i++) {
        const tr_weight &w = s.weights[i];
        float *dst = region.data() + w.region_offset;
        for (int k = 0; k < (w.nsegments ? w.nsegments : 1); k++) {
            tp_weight_slice ws = tr_weight_slice(&w, s.rank, k);
            dst += tp_weight_init_seeded(&ws, 7, dst);
        }
    }
    return region;
}

// tp 2 under llama-sp: rows (dim 0) and columns (dim 1) shards, replicated
// norms, and the vocabulary padded from 128 to 192 rows.
// A communicator that cannot split (NCCL's before 2.18) refuses data
// parallelism with the way out; one replica needs no split.
TEST(TrainDataParallel, CommunicatorWithoutSplitIsRefused)
{
    tp_comm_ops ops = {};
    ops.name = "nccl";
    tp_comm world = {&ops, 0, 4, nullptr, {}};
    tr_dp g;
    char err[400] = "";
    EXPECT_EQ(tr_dp_init(&g, &world, 2, 2, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("the nccl communicator of this build cannot: train it with --backend cpu"), std::string::npos) << err;
    ASSERT_EQ(tr_dp_init(&g, &world, 4, 1, err, sizeof err), 0) << err;
    EXPECT_EQ(g.tp.world, 4);
    EXPECT_EQ(g.dp.world, 1);
    tr_dp_free(&g);
}

std::string compile_gather_schedule(const TempDir &d)
{
    std::string dir = std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/train/llama/";
    std::string sched = d.path + "/t.sched";
    tpcc_test::Proc c = tpcc_test::run_tpcc({std::string(TPCC_SOURCE_DIR) + "/plans/llama-sp.plan", "--hf-config",
                                             dir + "config.json", "-D", "tp=2", "-D", "seq=16", "-D", "batch=2", "-D",
                                             "vocab_multiple=96", "--train", "-o", sched});
    EXPECT_EQ(c.code(), 0) << c.describe();
    return sched;
}

TEST(TrainGather, SlicesOfEveryKindMakeTheFullLogicalTensors)
{
    TempDir d;
    std::string sched = compile_gather_schedule(d);
    tp_comm_ops ops = {};
    ops.gather_bytes = fake_gather;
    tp_comm comm = {&ops, 0, 2, nullptr, {}};
    tr_layouts l;
    char err[800] = "";
    ASSERT_EQ(tr_layouts_load(&l, sched.c_str(), &comm, err, sizeof err), 0) << err;
    std::vector<float> r0 = seeded_region(l.ranks[0]), r1 = seeded_region(l.ranks[1]);
    g_rank1_bytes = r1.data();
    float **full = nullptr;
    ASSERT_EQ(tr_gather_region(&comm, &l, r0.data(), l.ranks[0].weight_elems, &full, err, sizeof err), 0) << err;
    const tr_schedule &s = l.ranks[0];
    int seen_dims[3] = {0, 0, 0};
    for (int i = 0; i < s.nweights; i++) {
        const tr_weight &w = s.weights[i];
        seen_dims[w.dim + 1]++;
        tp_weight_slice whole = {w.name, 0, {w.logical[0], w.logical[1]}, {0, 0}, -1, 0, 0, w.rank};
        std::vector<float> expect(size_t(tp_weight_slice_numel(&whole)));
        tp_weight_init_seeded(&whole, 7, expect.data());
        EXPECT_EQ(std::vector<float>(full[i], full[i] + expect.size()), expect) << w.name;
        EXPECT_EQ(tr_weight_replicas(&w, 2), w.dim < 0 ? 2 : 1) << w.name;
    }
    EXPECT_EQ(s.weights[0].shape[0], 192);     // the padding was there, and is gone
    EXPECT_EQ(s.weights[0].logical[0], 128);
    EXPECT_GT(seen_dims[0], 0);
    EXPECT_GT(seen_dims[1], 0);
    EXPECT_GT(seen_dims[2], 0);
    tr_full_free(full, s.nweights);
    tr_layouts_free(&l);
}

// The slices of rank r are placed into a tensor of rank 0's shape: a rank
// whose weights differ from rank 0's in name or shape is refused.
TEST(TrainGather, RanksWithOtherWeightsAreRefused)
{
    TempDir d;
    const std::string text = tpcc_test::slurp(compile_gather_schedule(d));
    const std::string name = "\"name\": \"model.layers.1.self_attn.o_proj.weight\"",
                      vocab = "\"logical_shape\": [128, 32]";
    struct Edit {
        std::string from, to;
    };
    for (const Edit &e : {Edit{name, "\"name\": \"model.layers.1.self_attn.out_proj.weight\""},
                          Edit{vocab, "\"logical_shape\": [120, 32]"}}) {
        std::string edited = text;
        size_t at = edited.rfind(e.from);   // rank 1's
        ASSERT_NE(at, std::string::npos) << e.from;
        ASSERT_NE(edited.find(e.from), at) << e.from;
        edited.replace(at, e.from.size(), e.to);
        std::string sched = d.write("edited.sched", edited);
        tp_comm_ops ops = {};
        tp_comm comm = {&ops, 0, 2, nullptr, {}};
        tr_layouts l;
        char err[800] = "";
        EXPECT_EQ(tr_layouts_load(&l, sched.c_str(), &comm, err, sizeof err), -1) << e.to;
        EXPECT_NE(std::string(err).find("rank 1's weights differ in name or shape from rank 0's"), std::string::npos)
            << err;
    }
}

}  // namespace

// Placement algebra (sched/layout.c), plan pattern matching
// (tp_pattern_match in compiler/plan/plan.c) and did-you-mean suggestions
// (compiler/diag/suggest.c).
#include <gtest/gtest.h>

#include <string>
#include <vector>

extern "C" {
#include "sched/layout.h"
#include "compiler/plan/plan.h"
#include "compiler/diag/suggest.h"
}

namespace {

std::string str(tp_placement p)
{
    char buf[24];
    const char *r = tp_placement_str(p, buf, sizeof buf);
    EXPECT_EQ(r, buf) << "tp_placement_str must return its buffer";
    return r;
}

// --- normalisation and equality -----------------------------------------------

TEST(Placement, NormalisesNegativeShardDims)
{
    tp_placement p = tp_placement_norm(tp_shard(-1), 3);
    EXPECT_EQ(p.kind, TP_SHARD);
    EXPECT_EQ(p.dim, 2);
    EXPECT_EQ(tp_placement_norm(tp_shard(-2), 3).dim, 1);
    EXPECT_EQ(tp_placement_norm(tp_shard(-3), 3).dim, 0);
    EXPECT_EQ(tp_placement_norm(tp_shard(-1), 2).dim, 1);
    EXPECT_EQ(tp_placement_norm(tp_shard(-1), 4).dim, 3);
}

TEST(Placement, NormLeavesNonNegativeShardAndOtherKindsAlone)
{
    EXPECT_EQ(tp_placement_norm(tp_shard(0), 3).dim, 0);
    EXPECT_EQ(tp_placement_norm(tp_shard(2), 3).dim, 2);
    EXPECT_EQ(tp_placement_norm(tp_replicate(), 3).kind, TP_REPLICATE);
    EXPECT_EQ(tp_placement_norm(tp_partial(), 3).kind, TP_PARTIAL);
    EXPECT_EQ(tp_placement_norm(tp_mask_partial(), 3).kind, TP_MASK_PARTIAL);
}

TEST(Placement, EqualityNormalisesBothSides)
{
    EXPECT_TRUE(tp_placement_eq(tp_shard(-1), tp_shard(2), 3));
    EXPECT_TRUE(tp_placement_eq(tp_shard(2), tp_shard(-1), 3));
    EXPECT_TRUE(tp_placement_eq(tp_shard(-1), tp_shard(-1), 3));
    EXPECT_TRUE(tp_placement_eq(tp_shard(-1), tp_shard(1), 2));
    EXPECT_FALSE(tp_placement_eq(tp_shard(-1), tp_shard(1), 3));
    EXPECT_FALSE(tp_placement_eq(tp_shard(0), tp_shard(1), 3));
    EXPECT_FALSE(tp_placement_eq(tp_shard(-1), tp_shard(-2), 3));
}

TEST(Placement, EqualityComparesKinds)
{
    EXPECT_TRUE(tp_placement_eq(tp_replicate(), tp_replicate(), 3));
    EXPECT_TRUE(tp_placement_eq(tp_partial(), tp_partial(), 3));
    EXPECT_TRUE(tp_placement_eq(tp_mask_partial(), tp_mask_partial(), 3));
    EXPECT_FALSE(tp_placement_eq(tp_replicate(), tp_partial(), 3));
    EXPECT_FALSE(tp_placement_eq(tp_partial(), tp_mask_partial(), 3));
    EXPECT_FALSE(tp_placement_eq(tp_replicate(), tp_shard(0), 3));
    EXPECT_FALSE(tp_placement_eq(tp_shard(0), tp_replicate(), 3));
    EXPECT_FALSE(tp_placement_eq(tp_shard(0), tp_partial(), 3));
}

TEST(Placement, DimIsIgnoredForNonShardKinds)
{
    tp_placement r5 = {TP_REPLICATE, 5}, p7 = {TP_PARTIAL, 7};
    EXPECT_TRUE(tp_placement_eq(r5, tp_replicate(), 3));
    EXPECT_TRUE(tp_placement_eq(p7, tp_partial(), 3));
}

TEST(Placement, IsPartial)
{
    EXPECT_TRUE(tp_placement_is_partial(tp_partial()));
    EXPECT_TRUE(tp_placement_is_partial(tp_mask_partial()));
    EXPECT_FALSE(tp_placement_is_partial(tp_replicate()));
    EXPECT_FALSE(tp_placement_is_partial(tp_shard(0)));
}

// --- spelling -----------------------------------------------------------------

TEST(Placement, StrSpellsPlacementsAsPlansDo)
{
    EXPECT_EQ(str(tp_replicate()), "Replicate()");
    EXPECT_EQ(str(tp_shard(0)), "Shard(0)");
    EXPECT_EQ(str(tp_shard(1)), "Shard(1)");
    EXPECT_EQ(str(tp_shard(2)), "Shard(2)");
    EXPECT_EQ(str(tp_shard(-1)), "Shard(-1)");
    EXPECT_EQ(str(tp_partial()), "Partial()");
    EXPECT_EQ(str(tp_mask_partial()), "MaskPartial()");
}

TEST(Placement, StrTruncatesToTheBufferAndTerminates)
{
    char buf[8];
    memset(buf, 'x', sizeof buf);
    tp_placement_str(tp_mask_partial(), buf, 6);
    EXPECT_STREQ(buf, "MaskP");
    EXPECT_EQ(buf[6], 'x') << "wrote past len";
}

// --- redistribution table -------------------------------------------------------

struct Row {
    tp_placement from, to;
    int rank;
    tp_redist_kind want;
    const char *why;
};

TEST(Redist, MatchesPyTorchsTable)
{
    const Row rows[] = {
        // equal placements: nothing to do
        {tp_replicate(), tp_replicate(), 3, TP_REDIST_NONE, "R -> R"},
        {tp_shard(1), tp_shard(1), 3, TP_REDIST_NONE, "S(1) -> S(1)"},
        {tp_shard(-1), tp_shard(2), 3, TP_REDIST_NONE, "S(-1) -> S(2) on rank 3"},
        {tp_shard(2), tp_shard(-1), 3, TP_REDIST_NONE, "S(2) -> S(-1) on rank 3"},
        {tp_partial(), tp_partial(), 3, TP_REDIST_NONE, "P -> P"},
        {tp_mask_partial(), tp_mask_partial(), 3, TP_REDIST_NONE, "MaskP -> MaskP"},
        // Shard -> Replicate: all-gather
        {tp_shard(0), tp_replicate(), 3, TP_REDIST_ALL_GATHER, "S(0) -> R"},
        {tp_shard(1), tp_replicate(), 3, TP_REDIST_ALL_GATHER, "S(1) -> R"},
        {tp_shard(-1), tp_replicate(), 3, TP_REDIST_ALL_GATHER, "S(-1) -> R"},
        // Partial -> Replicate: all-reduce
        {tp_partial(), tp_replicate(), 3, TP_REDIST_ALL_REDUCE, "P -> R"},
        {tp_mask_partial(), tp_replicate(), 3, TP_REDIST_ALL_REDUCE, "MaskP -> R"},
        // Partial -> Shard: reduce-scatter
        {tp_partial(), tp_shard(1), 3, TP_REDIST_REDUCE_SCATTER, "P -> S(1)"},
        {tp_partial(), tp_shard(-1), 3, TP_REDIST_REDUCE_SCATTER, "P -> S(-1)"},
        {tp_mask_partial(), tp_shard(1), 3, TP_REDIST_REDUCE_SCATTER, "MaskP -> S(1)"},
        // Shard(i) -> Shard(j): all-to-all
        {tp_shard(1), tp_shard(2), 3, TP_REDIST_ALL_TO_ALL, "S(1) -> S(2)"},
        {tp_shard(2), tp_shard(0), 3, TP_REDIST_ALL_TO_ALL, "S(2) -> S(0)"},
        {tp_shard(-1), tp_shard(1), 3, TP_REDIST_ALL_TO_ALL, "S(-1) -> S(1) on rank 3"},
        // Replicate -> Shard: a local chunk
        {tp_replicate(), tp_shard(1), 3, TP_REDIST_LOCAL_SLICE, "R -> S(1)"},
        {tp_replicate(), tp_shard(-1), 3, TP_REDIST_LOCAL_SLICE, "R -> S(-1)"},
        // Replicate -> Partial: divide locally
        {tp_replicate(), tp_partial(), 3, TP_REDIST_LOCAL_DIVIDE, "R -> P"},
        // Shard -> Partial: PyTorch raises
        {tp_shard(1), tp_partial(), 3, TP_REDIST_INVALID, "S(1) -> P"},
        {tp_shard(-1), tp_partial(), 3, TP_REDIST_INVALID, "S(-1) -> P"},
        {tp_shard(0), tp_mask_partial(), 3, TP_REDIST_INVALID, "S(0) -> MaskP"},
    };
    for (const Row &r : rows)
        EXPECT_EQ(tp_redist_classify(r.from, r.to, r.rank), r.want)
            << r.why << ": got " << tp_redist_name(tp_redist_classify(r.from, r.to, r.rank))
            << ", want " << tp_redist_name(r.want);
}

TEST(Redist, NegativeDimsDependOnRank)
{
    // Shard(-1) is Shard(1) on a rank-2 tensor but Shard(2) on a rank-3 one
    EXPECT_EQ(tp_redist_classify(tp_shard(-1), tp_shard(1), 2), TP_REDIST_NONE);
    EXPECT_EQ(tp_redist_classify(tp_shard(-1), tp_shard(1), 3), TP_REDIST_ALL_TO_ALL);
    EXPECT_EQ(tp_redist_classify(tp_shard(1), tp_shard(-2), 3), TP_REDIST_NONE);
}

TEST(Redist, Names)
{
    EXPECT_STREQ(tp_redist_name(TP_REDIST_NONE), "none");
    EXPECT_STREQ(tp_redist_name(TP_REDIST_ALL_GATHER), "all_gather");
    EXPECT_STREQ(tp_redist_name(TP_REDIST_ALL_REDUCE), "all_reduce");
    EXPECT_STREQ(tp_redist_name(TP_REDIST_REDUCE_SCATTER), "reduce_scatter");
    EXPECT_STREQ(tp_redist_name(TP_REDIST_ALL_TO_ALL), "all_to_all");
    EXPECT_STREQ(tp_redist_name(TP_REDIST_LOCAL_SLICE), "local_slice");
    EXPECT_STREQ(tp_redist_name(TP_REDIST_LOCAL_DIVIDE), "local_divide");
    EXPECT_STREQ(tp_redist_name(TP_REDIST_INVALID), "invalid");
}

TEST(Redist, OnlyCollectivesCommunicate)
{
    EXPECT_TRUE(tp_redist_communicates(TP_REDIST_ALL_GATHER));
    EXPECT_TRUE(tp_redist_communicates(TP_REDIST_ALL_REDUCE));
    EXPECT_TRUE(tp_redist_communicates(TP_REDIST_REDUCE_SCATTER));
    EXPECT_TRUE(tp_redist_communicates(TP_REDIST_ALL_TO_ALL));
    EXPECT_FALSE(tp_redist_communicates(TP_REDIST_NONE));
    EXPECT_FALSE(tp_redist_communicates(TP_REDIST_LOCAL_SLICE));
    EXPECT_FALSE(tp_redist_communicates(TP_REDIST_LOCAL_DIVIDE));
    EXPECT_FALSE(tp_redist_communicates(TP_REDIST_INVALID));
}

// --- plan patterns ------------------------------------------------------------------

TEST(Pattern, StarMatchesOneComponent)
{
    EXPECT_TRUE(tp_pattern_match("layers.*.mlp", "layers.3.mlp"));
    EXPECT_TRUE(tp_pattern_match("layers.*.mlp", "layers.12.mlp"));
    EXPECT_FALSE(tp_pattern_match("layers.*.mlp", "layers.3.x.mlp"));
    EXPECT_FALSE(tp_pattern_match("layers.*.mlp", "layers.mlp"));
    EXPECT_FALSE(tp_pattern_match("layers.*.mlp", "layers.3.mlp.up_proj"));
    EXPECT_FALSE(tp_pattern_match("layers.*", "layers"));
    EXPECT_TRUE(tp_pattern_match("*", "model"));
    EXPECT_FALSE(tp_pattern_match("*", "model.layers"));
    EXPECT_TRUE(tp_pattern_match("model.layers.*.self_attn.q_proj", "model.layers.0.self_attn.q_proj"));
    EXPECT_FALSE(tp_pattern_match("model.layers.*.self_attn.q_proj", "model.layers.0.self_attn.k_proj"));
}

TEST(Pattern, StarWithinAComponent)
{
    EXPECT_TRUE(tp_pattern_match("mlp.*_proj", "mlp.up_proj"));
    EXPECT_TRUE(tp_pattern_match("mlp.*_proj", "mlp.gate_proj"));
    EXPECT_FALSE(tp_pattern_match("mlp.*_proj", "mlp.act"));
}

TEST(Pattern, BracketsAndQuestionMark)
{
    EXPECT_TRUE(tp_pattern_match("layers.[1-2].mlp", "layers.1.mlp"));
    EXPECT_TRUE(tp_pattern_match("layers.[1-2].mlp", "layers.2.mlp"));
    EXPECT_FALSE(tp_pattern_match("layers.[1-2].mlp", "layers.3.mlp"));
    EXPECT_FALSE(tp_pattern_match("layers.[1-2].mlp", "layers.12.mlp"));
    EXPECT_FALSE(tp_pattern_match("layers.[!1].mlp", "layers.1.mlp"));
    EXPECT_TRUE(tp_pattern_match("layers.[!1].mlp", "layers.0.mlp"));
    EXPECT_TRUE(tp_pattern_match("layers.?.mlp", "layers.3.mlp"));
    EXPECT_FALSE(tp_pattern_match("layers.?.mlp", "layers.12.mlp"));
    EXPECT_TRUE(tp_pattern_match("layers.??.mlp", "layers.12.mlp"));
}

TEST(Pattern, ExactNamesAndTheRoot)
{
    EXPECT_TRUE(tp_pattern_match("lm_head", "lm_head"));
    EXPECT_FALSE(tp_pattern_match("lm_head", "lm_hea"));
    EXPECT_FALSE(tp_pattern_match("lm_hea", "lm_head"));
    EXPECT_FALSE(tp_pattern_match("model", "model.norm"));
    EXPECT_FALSE(tp_pattern_match("model.norm", "model"));
    // "" is the root module and nothing else
    EXPECT_TRUE(tp_pattern_match("", ""));
    EXPECT_FALSE(tp_pattern_match("", "model"));
    EXPECT_FALSE(tp_pattern_match("", "lm_head"));
    EXPECT_FALSE(tp_pattern_match("model", ""));
    EXPECT_FALSE(tp_pattern_match("*", "")) << "fnmatch('', '*') is true in Python, but '*' "
                                               "is one component and the root has none";
}

TEST(Pattern, CaseSensitive)
{
    EXPECT_FALSE(tp_pattern_match("LM_HEAD", "lm_head"));
}

TEST(Pattern, LongComponentsStillMatchThemselves)
{
    // a name component longer than any fixed buffer must not silently fail to match
    std::string longname(300, 'a');
    EXPECT_TRUE(tp_pattern_match(longname.c_str(), longname.c_str()));
    EXPECT_TRUE(tp_pattern_match(("model." + longname).c_str(), ("model." + longname).c_str()));
    EXPECT_TRUE(tp_pattern_match("model.*", ("model." + longname).c_str()));
}

// --- suggestions ---------------------------------------------------------------------

TEST(Suggest, EditDistance)
{
    EXPECT_EQ(tp_edit_distance_within("", "", 4), 0);
    EXPECT_EQ(tp_edit_distance_within("abc", "abc", 4), 0);
    EXPECT_EQ(tp_edit_distance_within("", "abc", 4), 3);
    EXPECT_EQ(tp_edit_distance_within("abc", "", 4), 3);
    EXPECT_EQ(tp_edit_distance_within("kitten", "sitting", 4), 3);
    EXPECT_EQ(tp_edit_distance_within("sitting", "kitten", 4), 3);
    EXPECT_EQ(tp_edit_distance_within("flaw", "lawn", 4), 2);
    EXPECT_EQ(tp_edit_distance_within("hiden", "hidden", 4), 1);
    EXPECT_EQ(tp_edit_distance_within("q_prj", "q_proj", 4), 1);
    EXPECT_EQ(tp_edit_distance_within("ab", "ba", 4), 2);   // Levenshtein, not Damerau
    EXPECT_EQ(tp_edit_distance_within("kitten", "sitting", 2), 3);   // past the limit: limit + 1
}

TEST(Suggest, PicksTheClosestCandidate)
{
    const char *names[] = {"heads", "hidden", "head_dim", "kv_heads"};
    EXPECT_STREQ(tp_suggest("hiden", names, 4), "hidden");
    EXPECT_STREQ(tp_suggest("kv_head", names, 4), "kv_heads");
    EXPECT_STREQ(tp_suggest("head_dm", names, 4), "head_dim");
}

TEST(Suggest, NothingCloseEnough)
{
    const char *names[] = {"hidden", "heads"};
    EXPECT_EQ(tp_suggest("vocab", names, 2), nullptr);
    EXPECT_EQ(tp_suggest("anything", names, 0), nullptr);
    // a 2-letter word allows distance 1 only
    const char *xy[] = {"xy"};
    EXPECT_EQ(tp_suggest("ab", xy, 1), nullptr);
    const char *t[] = {"t"};
    EXPECT_STREQ(tp_suggest("tp", t, 1), "t");
}

TEST(Suggest, LimitIsAThirdOfTheWordCappedAtFour)
{
    // 9 letters: limit 3
    const char *three[] = {"abcdefxyz"};
    EXPECT_STREQ(tp_suggest("abcdefghi", three, 1), "abcdefxyz");
    const char *four9[] = {"abcdewxyz"};
    EXPECT_EQ(tp_suggest("abcdefghi", four9, 1), nullptr);
    // 18 letters: a third is 6, capped at 4
    std::string w(18, 'a');
    std::string d4 = std::string(14, 'a') + "bbbb", d5 = std::string(13, 'a') + "bbbbb";
    const char *c4[] = {d4.c_str()}, *c5[] = {d5.c_str()};
    EXPECT_STREQ(tp_suggest(w.c_str(), c4, 1), d4.c_str());
    EXPECT_EQ(tp_suggest(w.c_str(), c5, 1), nullptr);
}

TEST(Suggest, TiesGoToTheFirstCandidate)
{
    const char *names[] = {"tq", "tr"};
    EXPECT_STREQ(tp_suggest("tp", names, 2), "tq");
    const char *rev[] = {"tr", "tq"};
    EXPECT_STREQ(tp_suggest("tp", rev, 2), "tr");
}

}  // namespace

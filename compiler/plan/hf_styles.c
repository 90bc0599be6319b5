/* hf_styles.c: Hugging Face's tp_plan strings (see hf_styles.h). Each row
 * is read from transformers' own code: the class and the arguments its
 * registry gives the name, and what its hooks and shard_param do. */
#include <string.h>
#include "compiler/plan/hf_styles.h"

#define R {TP_REPLICATE, 0}
#define S_LAST {TP_SHARD, -1}

/* What the Colwise and Rowwise rows share. */
#define COLWISE_LINEAR "weight and bias Shard(0) (output features); input made a Replicate DTensor " \
                       "(a plain tensor labelled, a DTensor redistributed), "
#define ROWWISE_LINEAR "weight Shard(1) (input features), bias replicated and added once after the " \
                       "all-reduce; "
/* tpcc's models have no expert layers (a MoE checkpoint is unsupported),
 * so a MoE style always lands on a module without experts */
#define MOE_REFUSAL "it is for mixture-of-experts weights, which this model does not have"

static const tp_hf_style styles[] = {
    {"colwise", "5.23", "ColwiseParallel(input_layouts=Replicate(), output_layouts=Shard(-1))",
     COLWISE_LINEAR "output the plain local shard of the features (Shard(-1), use_local_output)",
     TP_HF_COLWISE, TP_HF_LINEAR, .input = R, .output = S_LAST, .use_local_output = true},
    {"colwise_rep", "5.23", "ColwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())",
     COLWISE_LINEAR "output all-gathered to a plain Replicate tensor",
     TP_HF_COLWISE, TP_HF_LINEAR, .input = R, .output = R, .use_local_output = true},
    {"colwise_gather_output", "5.23", "ColwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())",
     COLWISE_LINEAR "output all-gathered to a plain Replicate tensor (the same as \"colwise_rep\")",
     TP_HF_COLWISE, TP_HF_LINEAR, .input = R, .output = R, .use_local_output = true},
    {"rowwise", "5.23", "RowwiseParallel(input_layouts=Shard(-1), output_layouts=Replicate())",
     ROWWISE_LINEAR "input labelled Shard(-1) (a plain tensor) or redistributed to it (a DTensor); "
     "output all-reduced to a plain Replicate tensor",
     TP_HF_ROWWISE, TP_HF_LINEAR, .input = S_LAST, .output = R, .use_local_output = true, .bias_after_reduce = true},
    {"rowwise_split_input", "5.23", "RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())",
     ROWWISE_LINEAR "input labelled Replicate and sliced locally to Shard(-1); output all-reduced to a plain "
     "Replicate tensor",
     TP_HF_ROWWISE, TP_HF_LINEAR, .input = R, .output = R, .use_local_output = true, .bias_after_reduce = true},
    {"rowwise_rep", "5.23", "RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())",
     ROWWISE_LINEAR "input labelled Replicate and sliced locally to Shard(-1); output all-reduced to a plain "
     "Replicate tensor (the same as \"rowwise_split_input\")",
     TP_HF_ROWWISE, TP_HF_LINEAR, .input = R, .output = R, .use_local_output = true, .bias_after_reduce = true},
    {"embedding_rowwise", "5.23", "EmbeddingParallel(shard_dim=0)",
     "weight Shard(0) (vocabulary); token ids made a Replicate DTensor; the masked partial lookups "
     "all-reduced to a plain Replicate tensor",
     TP_HF_ROWWISE, TP_HF_EMBEDDING, .input = R, .output = R, .use_local_output = true},
    {"embedding_colwise", "5.23", "EmbeddingParallel(shard_dim=1)",
     "weight Shard(1) (embedding dim); token ids made a Replicate DTensor; output all-gathered to a plain "
     "Replicate tensor",
     TP_HF_COLWISE, TP_HF_EMBEDDING, .input = R, .output = R, .use_local_output = true},
    {"packed_colwise", "5.23", "PackedColwiseParallel()",
     "weight _StridedShard(dim=0, split_factor=2): each of two equal halves of a fused Linear (packed=(a, a), "
     "no bias: gate and up) sharded separately; input made Replicate and used locally; output the plain local "
     "share of both halves",
     TP_HF_COLWISE, TP_HF_PACKED, .input = R, .output = S_LAST, .use_local_output = true, .packed = true},
    {"sequence_parallel", "5.23", "SequenceParallel(use_local_output=True)",
     "parameters replicated; input labelled (plain) or redistributed (DTensor) to Shard(1); output the plain "
     "local sequence shard (PyTorch's SequenceParallel() returns a DTensor)",
     TP_HF_SEQUENCE, TP_HF_NORM, .input = R, .output = R, .use_local_output = true},
    {"replicated_with_grad_allreduce", "5.23", "ReplicatedWithGradAllReduce()",
     "no forward hook, parameters replicated; in training their gradients are all-reduced (a backward "
     "hook: nothing in a forward schedule)",
     TP_HF_IDENTITY, TP_HF_ANY, .input = R, .output = R, .use_local_output = false},
    {"replicate", "5.23", "TensorParallelLayer()",
     "nothing: no hook, parameters replicated on every rank",
     TP_HF_IDENTITY, TP_HF_ANY, .input = R, .output = R, .use_local_output = false},
    {"local_params", "5.23", "LocalParamsParallel()",
     "the module's forward sees its own DTensor parameters as local tensors; no hook on values, and "
     "tpcc shards no parameter through its own key, so they are replicated",
     TP_HF_IDENTITY, TP_HF_ANY, .input = R, .output = R, .use_local_output = false},
    {"all_reduce", "5.23", "AllReduceParallel()",
     "a plain output is labelled Partial and all-reduced (a DTensor one redistributed to Replicate); "
     "the output leaves plain",
     TP_HF_IDENTITY, TP_HF_ANY, .input = R, .output = R, .use_local_output = true, .reduce_output = true},
    {"mla_kv_a_proj", "5.23", "MlaKvAProjParallel()",
     "identity in the forward pass (the RoPE part of the output gets an all-reduce in backward); needs "
     "the config's qk_rope_head_dim (multi-head latent attention)",
     TP_HF_IDENTITY, TP_HF_ANY, .input = R, .output = R, .use_local_output = false, .needs_config = "qk_rope_head_dim"},
    {"packed_rowwise", "5.23", "PackedRowwiseParallel()",
     "shards a parameter's last dim in split_factor (2) strided pieces and installs no forward hook",
     TP_HF_REFUSED, TP_HF_ANY, .input = R, .output = R, .use_local_output = false,
     .refusal = "transformers applies it to MoE experts' packed 3-D gate_up_proj parameter; on an nn.Linear "
                "its last dim is the input features and the module gets no hook, so a plain input meets "
                "DTensor parameters (PyTorch raises 'got mixed torch.Tensor and DTensor'); " MOE_REFUSAL},
    {"moe_tp_experts", "5.23", "MoeExpertsParallel()", "runs each rank's shard of every expert and all-reduces",
     TP_HF_REFUSED, TP_HF_ANY, .input = R, .output = R, .use_local_output = false, .refusal = MOE_REFUSAL},
    {"moe_identity_expert", "5.23", "MoeIdentityParallel()", "divides an identity expert's input by tp",
     TP_HF_REFUSED, TP_HF_ANY, .input = R, .output = R, .use_local_output = false, .refusal = MOE_REFUSAL},
    {"grouped_gemm", "5.23", "MoEParamShard(Shard(0), shards_expert_dim=True)",
     "an expert-parallel parameter style (transformers/distributed/expert_parallel.py)",
     TP_HF_REFUSED, TP_HF_ANY, .input = R, .output = R, .use_local_output = false, .refusal = MOE_REFUSAL},
    {"ep_dispatch_experts", "5.23", "EpDispatchExpertsParallel()",
     "an expert-parallel style (transformers/distributed/expert_parallel.py)",
     TP_HF_REFUSED, TP_HF_ANY, .input = R, .output = R, .use_local_output = false, .refusal = MOE_REFUSAL},
    {"ep_router", "4.56", "RouterParallel()", "masks the router's scores and indices to each rank's experts",
     TP_HF_REFUSED, TP_HF_ANY, .input = R, .output = R, .use_local_output = false,
     .refusal = MOE_REFUSAL " (transformers 5.23 removed it: its ep_plan uses ep_dispatch_experts)"},
    {"local_colwise", "4.56", "ColwiseParallel(use_dtensor=False)",
     "weight and bias sharded as colwise, as plain local tensors, and no hook at all: the module computes "
     "on its input as it arrives (it must be a plain, whole tensor); output the plain local shard (Shard(-1))",
     TP_HF_COLWISE, TP_HF_LINEAR, .input = R, .output = S_LAST, .use_local_output = true, .no_hooks = true},
    {"local_rowwise", "4.56", "RowwiseParallel(use_dtensor=False)",
     "weight Shard(1) as a plain local tensor, bias whole on every rank, and no hook at all: the input must "
     "be the plain feature shard; output plain partial sums that something else must reduce",
     TP_HF_ROWWISE, TP_HF_LINEAR, .input = S_LAST, .output = R, .use_local_output = false, .no_hooks = true},
    {"local", "4.56", "IsolatedParallel()",
     "a DTensor input becomes its local tensor (only the first positional input is kept); the output is "
     "left alone; its own parameters are divided by tp",
     TP_HF_IDENTITY, TP_HF_NO_PARAMS, .input = R, .output = R, .use_local_output = false, .local_input = true,
     .first_input_only = true},
    {"gather", "4.56", "GatherParallel()",
     "a DTensor input becomes its local tensor; the plain output is all-reduced (summed) in place",
     TP_HF_IDENTITY, TP_HF_ANY, .input = R, .output = R, .use_local_output = true, .local_input = true, .reduce_output = true},
    {"local_packed_rowwise", "4.56", "PackedRowwiseParallel(use_dtensor=False)",
     "shards a parameter's last dim in 2 interleaved blocks as a plain local tensor, no hook",
     TP_HF_REFUSED, TP_HF_ANY, .input = R, .output = R, .use_local_output = false,
     .refusal = "transformers 4.56 applies it to MoE experts' packed gate_up_proj; " MOE_REFUSAL},
};
#define NSTYLES ((int)(sizeof styles / sizeof *styles))

const tp_hf_style *tp_hf_style_find(const char *name)
{
    for (int i = 0; i < NSTYLES; i++)
        if (!strcmp(styles[i].name, name))
            return &styles[i];
    return NULL;
}

int tp_hf_style_names(const char ***names)
{
    static const char *all[NSTYLES];
    for (int i = 0; i < NSTYLES; i++)
        all[i] = styles[i].name;
    *names = all;
    return NSTYLES;
}

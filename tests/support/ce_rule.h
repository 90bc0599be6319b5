// ce_rule.h: the two label conventions of the cross-entropy kernels
// (tp_ce_rule, runtime/backends/backend.h), each a mean over the call's
// labelled rows, for tests that call the kernels directly.
#ifndef TPCC_TEST_CE_RULE_H
#define TPCC_TEST_CE_RULE_H

#include "runtime/backends/backend.h"

// Hugging Face's causal-LM loss: row (b, t) against labels[b, t + 1]
inline constexpr tp_ce_rule kHfLoss = {1, 0.0};
// labels that are the next tokens already (torchtitan's, PyTorch's CrossEntropyLoss)
inline constexpr tp_ce_rule kNextTokenLoss = {0, 0.0};

#endif // TPCC_TEST_CE_RULE_H

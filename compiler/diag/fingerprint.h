/* fingerprint.h: a finding's identity across runs, for SARIF's
 * partialFingerprints: code-scanning services match a result to the alert
 * it was before by it, so it must not change when unrelated lines move. */
#ifndef TPCC_FINGERPRINT_H
#define TPCC_FINGERPRINT_H

#include <stdint.h>

#include "compiler/diag/diag.h"

/* A hash of the check, the file (`where`: its URI), the plan whose check
 * found it (`plan`: its URI; a model file's finding is one per plan using
 * the model, whatever order the plans come in), the text the finding
 * points at with runs of blanks folded to one space (the plan entry, the
 * model line), and the message with line and column numbers left out
 * ("line 12", "3:5"). No line number enters it, so inserting a line above
 * leaves it as it was. */
uint64_t tp_fingerprint(const tp_diag *g, const tp_sources *src, const char *where, const char *plan);

#endif /* TPCC_FINGERPRINT_H */

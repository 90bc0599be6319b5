/* mirror_comm.h: a communicator for running any rank of a multi-rank
 * schedule in one process, without MPI: rank `rank` of `world`, where
 * every other rank holds exactly what this one holds and adds nothing to
 * a sum. Each collective reads and writes the sizes the real ones do
 * (comm/comm.h), so a schedule's collectives are exercised on the buffers
 * they name; the numbers are not those of a real run. */
#ifndef TPCC_FUZZ_MIRROR_COMM_H
#define TPCC_FUZZ_MIRROR_COMM_H

#include "runtime/comm/comm.h"

void tp_comm_mirror(tp_comm *c, int rank, int world);

#endif /* TPCC_FUZZ_MIRROR_COMM_H */

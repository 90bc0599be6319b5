/* write.h: a program (program.h) as the versioned, self-describing JSON
 * schedule tprun executes, one op list per rank, written atomically. The
 * format is documented in docs/schedule.md. */
#ifndef TP_SCHED_WRITE_H
#define TP_SCHED_WRITE_H

#include <stddef.h>
#include <stdint.h>
#include "sched/dp_shard.h"
#include "sched/program.h"
#include "sched/train_settings.h"

/* One resolved configuration value, recorded in the schedule's "config". */
typedef enum tp_setting_kind { TP_SETTING_NULL, TP_SETTING_INT, TP_SETTING_BOOL, TP_SETTING_REAL, TP_SETTING_STR } tp_setting_kind;
typedef struct tp_setting {
    const char *name;           /* borrowed */
    tp_setting_kind kind;       /* NULL: never evaluated, or failed */
    int64_t i;                  /* INT, BOOL (0 or 1) */
    double real;                /* REAL (finite) */
    const char *str;            /* STR, borrowed */
} tp_setting;

typedef struct tp_schedule_meta {
    const char *producer;       /* "tpcc 0.1.0" */
    uint64_t input_hash;        /* hash of plan + model + resolved config + dtype */
    tp_dtype dtype;             /* element type of activations and weights */
    const tp_setting *config;   /* the resolved configuration, in order, names unique */
    int nconfig;
    const char *plan_path;      /* recorded for provenance */
    int64_t data_parallel;      /* replicas of the tp group (tpcc --train); 0 or 1: none */
    const tp_train_values *train;   /* the plan's train { } settings (tpcc --train), or NULL */
    tp_dp_shard dp_shard;       /* the plan's train { shard }; written with data_parallel > 1 */
} tp_schedule_meta;

/* Write the schedule; on any error nothing is left at `path` (the previous
 * file, if any, is untouched) and -1 is returned with a message. */
int tp_schedule_write(const tp_ir *ir, const tp_schedule_meta *meta, const char *path, char *err, size_t errlen);

#endif /* TP_SCHED_WRITE_H */

/* tprun.c: run a tpcc schedule. The only place in the runtime that exits.
 *
 *   tprun llama.sched                      one rank, no launcher
 *   mpiexec -n 2 tprun llama.sched         ranks launched by MPI
 *   tprun -n 2 llama.sched                 tprun launches mpiexec itself
 *   tprun -n 8 -f hosts -ppn 4 llama.sched on the hosts listed, 4 ranks each
 *   srun --ntasks-per-node=4 tprun llama.sched   ranks launched by Slurm
 *
 * A failure on one rank prints that rank's message and aborts the whole
 * job through the communicator, so no rank is left waiting in a
 * collective; one in a phase every rank leaves together (loading, a save:
 * tp_agree) is every rank's, printed once, and ends the job without an
 * abort. A rank that dies is named by its monitor (job/monitor.h). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include "runtime/job/child.h"
#include "runtime/job/clobber.h"
#include "runtime/job/monitor.h"
#include "runtime/exec/exec.h"
#include "runtime/backends/gpu.h"
#include "runtime/comm/gpu_share.h"
#include "runtime/comm/node.h"
#include "runtime/comm/progress.h"
#include "runtime/io/npy.h"
#include "runtime/job/run.h"
#include "runtime/io/weights.h"
#include "util/number.h"
#include "util/xalloc.h"

static const char usage[] =
    "usage: tprun [options] SCHEDULE\n"
    "\n"
    "Run a schedule compiled by `tpcc PLAN -o SCHEDULE` on every rank: a forward step (the\n"
    "loss, or the logits' shape, and the next tokens), or training for a schedule compiled\n"
    "with --train (below). On the GPUs (CUDA backend: fp32 or bf16 schedules, ranks over NCCL)\n"
    "where the build has the CUDA backend and the machine a GPU, else on the CPU (OpenBLAS and\n"
    "C: fp32 schedules, ranks over MPI). Started by mpiexec or srun, each process is one rank;\n"
    "a rank takes the only GPU it sees, else the one at its rank among its node's ranks (modulo\n"
    "the GPUs: ranks beyond them share, and their collectives stage through host memory).\n"
    "\n"
    "  -n N                 launch N ranks with mpiexec (the schedule's world size; times its\n"
    "                       data_parallel replicas for a dp x tp training schedule); ranks are\n"
    "                       laid out tp fastest (rank = dp index x tp + tp index)\n"
    "  -f, --hostfile FILE  with -n: the hosts to launch on, passed to mpiexec (MPICH: one\n"
    "                       host[:slots] a line); also -hostfile\n"
    "  -ppn P               with -n: P ranks per node, passed to mpiexec; a multiple of the\n"
    "                       tensor-parallel size keeps each tp group inside a node\n"
    "  --weights PATH       a .safetensors file or a Hugging Face checkpoint directory\n"
    "                       (sharded with model.safetensors.index.json); default: seeded weights\n"
    "  --seed S             seed of the default initialisation (default 0), identical for any tp\n"
    "  --tokens IDS         token ids: a comma list or a .npy file (batch x seq from the schedule);\n"
    "                       default: a seeded sequence\n"
    "  --labels IDS         labels for the loss, in the schedule's convention (a model's own\n"
    "                       loss shifts them, as Hugging Face's; tpcc --loss cross_entropy takes\n"
    "                       the next tokens); 'tokens' uses the input ids (their next tokens for\n"
    "                       the latter), the default for a loss; refused when its model\n"
    "                       returns logits. Training: a stream beside --data\n"
    "  --ignore-index N     the label value the loss ignores (default -100; PyTorch's\n"
    "                       CrossEntropyLoss(ignore_index=N), such as a pad id)\n"
    "  --pad-id P           tokens equal to P are padding: no query sees them, and a padding\n"
    "                       query's attention is 0 (a schedule compiled with tpcc --segments)\n"
    "  --eos-id E           a document ends after each E: attention within documents and\n"
    "                       positions restarting at each (packed sequences; tpcc --segments)\n"
    "  --out FILE.npy       write the full logits [batch, seq, vocab] (gathered on rank 0)\n"
    "  --compare FILE.npy   compare the logits with a reference and report the largest difference\n"
    "  --tolerance T        the largest difference --compare accepts (default 1e-4)\n"
    "  --profile            time per op kind and per collective, per rank\n"
    "  --profile-json FILE  the same plus weight bytes read and collective bytes, as JSON; training:\n"
    "                       the bytes of the data each rank read (--profile's KiB of data read)\n"
    "  --trace FILE         Chrome trace-event JSON, one track per rank (Perfetto)\n"
    "  --threads T          the CPU backend's threads per rank, which every kernel splits its\n"
    "                       work over, BLAS calls included (default 1)\n"
    "  --repeat N           run the forward N times after loading (default 1) and report the\n"
    "                       median step; --profile-json lists every step's time; --out,\n"
    "                       --compare and --trace use the last step\n"
    "  --backend B          cuda (bf16 or fp32 schedules) or cpu (fp32);\n"
    "                       default: cuda when a GPU is usable, else cpu\n"
    "  --comm C             the CUDA ranks' collectives: nccl (default; one GPU per rank) or\n"
    "                       mpi (each collective copied to host memory, run by MPI, copied\n"
    "                       back: ranks may share a GPU; bf16 sums in fp32). Chosen, with a\n"
    "                       warning, where ranks share a GPU. An error with the cpu backend,\n"
    "                       whose ranks always use MPI\n"
    "  -q, --quiet          print nothing but errors\n"
    "  -h, --help, --version\n"
    "\n"
    "Training (a schedule from `tpcc PLAN --train -o FILE.sched`): fp32 on either backend, bf16\n"
    "with fp32 master weights on the CUDA one; dp x tp meshes, ZeRO and FSDP on both. What the\n"
    "plan's train { } block gives (lr, betas, schedule, ...) is the default of the option below,\n"
    "which overrides it:\n"
    "  --data TOKENS        the token stream: a 1-D .npy (int32, int64, uint16, uint32) or an\n"
    "                       llm.c .bin; step i takes the next batch x seq tokens as input ids\n"
    "                       and labels (a model's own loss shifts them, as Hugging Face does;\n"
    "                       for tpcc --loss cross_entropy the labels are the tokens one further\n"
    "                       on, as llm.c's loader; --labels FILE gives them instead); with D\n"
    "                       data-parallel replicas, the next D x batch x seq, a slice each, and\n"
    "                       the gradients averaged over the replicas. Read on demand: each rank\n"
    "                       checks its share of the stream before step 1, then reads its own rows\n"
    "  --steps N            optimizer steps to take (default with --epochs: all its steps)\n"
    "  --epochs E           passes over the data the run may make (default 1); each epoch takes\n"
    "                       the whole steps its samples (rows of seq tokens) hold\n"
    "  --shuffle-seed S     each epoch visits the samples in a permutation drawn from S and the\n"
    "                       epoch (default: the stream's order); a resumed run sees the samples\n"
    "                       the run it resumes would have seen\n"
    "  --eval-data FILE     a validation stream (as --data): its loss and perplexity, the\n"
    "                       weights not updated, after every --eval-every N steps and the last\n"
    "  --eval-labels FILE   its labels, as --labels for --data\n"
    "  --attention-mask FILE  a stream beside --data: Hugging Face's attention_mask, 1 a token,\n"
    "                       0 padding (as --pad-id, which it replaces; tpcc --segments)\n"
    "  --position-ids FILE  a stream beside --data: DataCollatorWithFlattening's position_ids, a\n"
    "                       document starting at each 0 and counting up by one (as --eos-id,\n"
    "                       which it replaces; tpcc --segments)\n"
    "  --eval-attention-mask FILE, --eval-position-ids FILE\n"
    "                       the same for --eval-data, given with --attention-mask, --position-ids\n"
    "  --eval-every N       steps between evaluations (default: the last step only)\n"
    "  --micro-batches M    gradient accumulation: M runs of the schedule's batch per step, their\n"
    "                       gradients summed in fp32 before one optimizer step (default 1)\n"
    "  --lr LR              peak learning rate (default 1e-3)\n"
    "  --warmup W           linear warm-up steps (default 0)\n"
    "  --warmup-start-factor F  the warm-up's first factor of LR (default 0, transformers';\n"
    "                       PyTorch's LinearLR(start_factor=F))\n"
    "  --schedule S         cosine (default; transformers' get_cosine_schedule_with_warmup),\n"
    "                       constant, linear (get_linear_schedule_with_warmup) or wsd\n"
    "                       (get_wsd_schedule: stable, then --decay-steps), after the warm-up\n"
    "  --decay-steps D      wsd: the last D steps decay to --min-lr (num_decay_steps)\n"
    "  --decay-type T       wsd: their shape, cosine (default), linear or 1-sqrt\n"
    "  --min-lr M           the decay's floor (default 0; CosineAnnealingLR's eta_min)\n"
    "  --adam-beta1 B1, --adam-beta2 B2, --adam-epsilon E\n"
    "                       AdamW's betas and eps (default 0.9, 0.999, 1e-8)\n"
    "  --weight-decay WD    AdamW's decoupled weight decay on 2-D weights (default 0.01)\n"
    "  --decay-all          decay norms and biases too\n"
    "  --no-decay NAMES     decay every parameter but those whose name holds one of NAMES\n"
    "                       (comma-separated: bias,norm, as transformers' Trainer)\n"
    "  --max-grad-norm C    clip the global gradient norm to C (default 1.0; 0: no clipping)\n"
    "  --log-json FILE      {\"settings\": {the optimizer's and the schedule's},\n"
    "                       \"steps\": [{\"step\", \"loss\", \"lr\", \"grad_norm\", \"seconds\"}...]}\n"
    "  --grads-out FILE     the first step's full gradients (before clipping) as safetensors,\n"
    "                       under the checkpoint's names\n"
    "  --save DIR           after the last step, a Hugging Face checkpoint (model.safetensors,\n"
    "                       config.json from --weights DIR) with optimizer.safetensors and\n"
    "                       tprun_state.json, written atomically; DIR is checked before the\n"
    "                       first step and locked (DIR.lock) against a second run saving there\n"
    "  --save-every N       --save DIR after every N-th step too, so a stopped run loses at most\n"
    "                       N steps (each save replaces DIR atomically; --resume DIR goes on)\n"
    "  --save-keep K        keep the K - 1 checkpoints DIR held before as DIR.step-S (S their\n"
    "                       step), the newest ones; default 1: DIR only\n"
    "  --max-shard-size S   --save's model files: above S (default 2GiB; 5GB, 500MB, ...)\n"
    "                       model-0000i-of-0000n.safetensors with an index, as\n"
    "                       save_pretrained(max_shard_size=S)\n"
    "  --resume DIR         weights, optimizer state and step count from a --save directory;\n"
    "                       training goes on to --steps, the data from where it stopped\n"
    "  --on-nonfinite A     a step whose loss or gradient norm is NaN or infinite: stop (default;\n"
    "                       exit non-zero, nothing saved) or skip (its update dropped, logged)\n"
    "\n"
    "Examples (from the source tree):\n"
    "  tpcc plans/llama-tiny.plan -o tiny.sched\n"
    "  tprun -n 2 tiny.sched                    # 2 ranks, seeded weights and tokens\n"
    "  tprun -n 2 tiny.sched --threads 2 --profile\n"
    "  tpcc plans/llama-tiny.plan -D vocab=512 --train -o train.sched\n"
    "  tprun -n 2 train.sched --data data/genesis/genesis.train.npy --steps 5 --lr 3e-3\n"
    "\n"
    "Environment:\n"
    "  TPRUN_TIMEOUT        seconds a rank waits in one MPI collective before it ends the job\n"
    "                       (default 600); TPRUN_NCCL_TIMEOUT the same for NCCL (default 300)\n"
    "  TPRUN_IO_TIMEOUT     seconds an I/O phase (loading, a save) may last before the ranks\n"
    "                       end the job (default 7200); TPRUN_TIMEOUT does not apply in it\n"
    "  TPRUN_MPI_MAX_COUNT  the most elements one MPI call carries; larger collectives run in\n"
    "                       chunks (default 2147483647; lower it only to test the chunking)\n";

enum { OPT_WEIGHTS = 256, OPT_SEED, OPT_TOKENS, OPT_LABELS, OPT_OUT, OPT_COMPARE, OPT_TOL, OPT_PROFILE,
       OPT_PROFILE_JSON, OPT_TRACE, OPT_THREADS, OPT_REPEAT, OPT_BACKEND, OPT_COMM, OPT_VERSION, OPT_TRAIN,
       OPT_PPN };

/* -n and the options tprun hands to mpiexec with it */
typedef struct launcher {
    int ranks;                  /* -n: ranks to launch with mpiexec (0: launch nothing) */
    const char *hostfile;       /* -f, --hostfile, -hostfile */
    const char *ppn;            /* -ppn: ranks per node, as given */
} launcher;

/* Hydra spells its options with one dash (-ppn, -hostfile), which getopt
 * would read as clusters of short options: give getopt their two-dash
 * forms. Only the copy getopt parses is changed; mpiexec and the ranks get
 * the command line as given. */
static void hydra_spellings(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        if (!strcmp(argv[i], "-ppn"))
            argv[i] = "--ppn";
        else if (!strcmp(argv[i], "-hostfile"))
            argv[i] = "--hostfile";
    }
}

/* -f and -ppn go to mpiexec, so only with -n; the hostfile is checked by
 * the process that launches (a rank may run where the file is not). */
static int launcher_options_valid(const launcher *l)
{
    const char *alone = l->hostfile ? "-f/--hostfile" : l->ppn ? "-ppn" : NULL;
    if (alone && !l->ranks) {
        fprintf(stderr, "tprun: %s goes with -n N: it is passed to the mpiexec that tprun -n launches (started by "
                        "mpiexec or srun, give it to them)\n", alone);
        return -1;
    }
    if (l->ppn) {
        int64_t ppn;
        if (tp_parse_int(l->ppn, 1, 4096, &ppn)) {
            fprintf(stderr, "tprun: -ppn takes a number of ranks per node, not '%s'\n", l->ppn);
            return -1;
        }
    }
    return 0;
}

static int parse_args(tr_options *o, launcher *l, int argc, char **argv)
{
    static const struct option longs[] = {
        {"weights", required_argument, 0, OPT_WEIGHTS}, {"seed", required_argument, 0, OPT_SEED},
        {"tokens", required_argument, 0, OPT_TOKENS}, {"labels", required_argument, 0, OPT_LABELS},
        {"ignore-index", required_argument, 0, OPT_TRAIN},
        {"pad-id", required_argument, 0, OPT_TRAIN}, {"eos-id", required_argument, 0, OPT_TRAIN},
        {"out", required_argument, 0, OPT_OUT}, {"compare", required_argument, 0, OPT_COMPARE},
        {"tolerance", required_argument, 0, OPT_TOL}, {"profile", no_argument, 0, OPT_PROFILE},
        {"profile-json", required_argument, 0, OPT_PROFILE_JSON}, {"trace", required_argument, 0, OPT_TRACE},
        {"threads", required_argument, 0, OPT_THREADS}, {"backend", required_argument, 0, OPT_BACKEND},
        {"comm", required_argument, 0, OPT_COMM},
        {"repeat", required_argument, 0, OPT_REPEAT},
        {"data", required_argument, 0, OPT_TRAIN}, {"steps", required_argument, 0, OPT_TRAIN},
        {"micro-batches", required_argument, 0, OPT_TRAIN}, {"epochs", required_argument, 0, OPT_TRAIN},
        {"shuffle-seed", required_argument, 0, OPT_TRAIN}, {"eval-data", required_argument, 0, OPT_TRAIN},
        {"eval-labels", required_argument, 0, OPT_TRAIN}, {"eval-every", required_argument, 0, OPT_TRAIN},
        {"attention-mask", required_argument, 0, OPT_TRAIN}, {"position-ids", required_argument, 0, OPT_TRAIN},
        {"eval-attention-mask", required_argument, 0, OPT_TRAIN},
        {"eval-position-ids", required_argument, 0, OPT_TRAIN},
        {"lr", required_argument, 0, OPT_TRAIN}, {"warmup", required_argument, 0, OPT_TRAIN},
        {"schedule", required_argument, 0, OPT_TRAIN}, {"weight-decay", required_argument, 0, OPT_TRAIN},
        {"decay-all", no_argument, 0, OPT_TRAIN}, {"no-decay", required_argument, 0, OPT_TRAIN}, {"max-grad-norm", required_argument, 0, OPT_TRAIN},
        {"log-json", required_argument, 0, OPT_TRAIN}, {"grads-out", required_argument, 0, OPT_TRAIN},
        {"save", required_argument, 0, OPT_TRAIN}, {"resume", required_argument, 0, OPT_TRAIN},
        {"max-shard-size", required_argument, 0, OPT_TRAIN}, {"on-nonfinite", required_argument, 0, OPT_TRAIN},
        {"save-every", required_argument, 0, OPT_TRAIN}, {"save-keep", required_argument, 0, OPT_TRAIN},
        {"warmup-start-factor", required_argument, 0, OPT_TRAIN}, {"min-lr", required_argument, 0, OPT_TRAIN},
        {"adam-beta1", required_argument, 0, OPT_TRAIN}, {"adam-beta2", required_argument, 0, OPT_TRAIN},
        {"adam-epsilon", required_argument, 0, OPT_TRAIN}, {"decay-steps", required_argument, 0, OPT_TRAIN},
        {"decay-type", required_argument, 0, OPT_TRAIN},
        {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, OPT_VERSION},
        {"hostfile", required_argument, 0, 'f'}, {"ppn", required_argument, 0, OPT_PPN},
        {0, 0, 0, 0},
    };
    int c, li;
    int64_t v;
    char why[300];
    opterr = 0;
    hydra_spellings(argc, argv);
    while ((c = getopt_long(argc, argv, ":n:f:qh", longs, &li)) != -1) {
        switch (c) {
        case 'n':
            if (tp_parse_int(optarg, 1, 4096, &v)) {
                fprintf(stderr, "tprun: -n takes a number of ranks from 1 to 4096, not '%s'\n", optarg);
                return -1;
            }
            l->ranks = (int)v;
            break;
        case 'f': l->hostfile = optarg; break;
        case OPT_PPN: l->ppn = optarg; break;
        case OPT_WEIGHTS: o->weights = optarg; break;
        case OPT_SEED:
            if (tp_parse_uint(optarg, &o->seed)) {
                fprintf(stderr, "tprun: --seed takes a non-negative decimal integer below 2^64, not '%s'\n", optarg);
                return -1;
            }
            break;
        case OPT_TOKENS: o->tokens = optarg; break;
        case OPT_LABELS: o->labels = optarg; break;
        case OPT_OUT: o->out = optarg; break;
        case OPT_COMPARE: o->compare = optarg; break;
        case OPT_TOL:
            if (tp_parse_real(optarg, 0, &o->tolerance)) {
                fprintf(stderr, "tprun: --tolerance takes a non-negative decimal number, not '%s'\n", optarg);
                return -1;
            }
            break;
        case OPT_PROFILE: o->profile = true; break;
        case OPT_PROFILE_JSON: o->profile_json = optarg; break;
        case OPT_TRACE: o->trace = optarg; break;
        case OPT_THREADS:
            if (tp_parse_int(optarg, 1, 256, &v)) {
                fprintf(stderr, "tprun: --threads takes a number of threads from 1 to 256, not '%s'\n", optarg);
                return -1;
            }
            o->threads = (int)v;
            break;
        case OPT_REPEAT:
            if (tp_parse_int(optarg, 1, 100000, &v)) {
                fprintf(stderr, "tprun: --repeat takes a number of forward steps from 1 to 100000, not '%s'\n",
                        optarg);
                return -1;
            }
            o->repeat = (int)v;
            break;
        case OPT_BACKEND:
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
                fprintf(stderr, "tprun: --backend takes cuda or cpu, not '%s'\n", optarg);
                return -1;
            }
            o->backend = optarg;
            break;
        case OPT_COMM:
            if (strcmp(optarg, "nccl") && strcmp(optarg, "mpi")) {
                fprintf(stderr, "tprun: --comm takes nccl or mpi, not '%s'\n", optarg);
                return -1;
            }
            o->comm = optarg;
            break;
        case OPT_TRAIN:
            if (tr_train_option(&o->train, longs[li].name, optarg, why, sizeof why)) {
                fprintf(stderr, "tprun: %s\n", why);
                return -1;
            }
            break;
        case 'q': o->quiet = true; break;
        case 'h': fputs(usage, stdout); return 1;
        case OPT_VERSION: printf("tprun %s\n", TPCC_VERSION); return 1;
        case ':':
            fprintf(stderr, "tprun: %s needs a value\nTry 'tprun --help'.\n", argv[optind - 1]);
            return -1;
        default:
            fprintf(stderr, "tprun: unknown option '%s'\nTry 'tprun --help'.\n", argv[optind - 1]);
            return -1;
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "tprun: give one schedule (compile one with tpcc PLAN -o FILE.sched)\nTry 'tprun --help'.\n");
        return -1;
    }
    o->schedule = argv[optind];
    if (launcher_options_valid(l))
        return -1;
    if (o->train.resume && o->weights) {
        fprintf(stderr, "tprun: --resume DIR loads the weights from DIR; drop --weights\n");
        return -1;
    }
    if (o->train.resume)
        o->weights = o->train.resume;
    return 0;
}

/* -n N: run the same command line under mpiexec, every argument as given
 * (the ranks, under MPI, take -n, -f and -ppn as said and launch nothing),
 * after mpiexec's own -n, -f and -ppn (MPICH's hydra spellings). `argv` is
 * the command line before getopt reordered it. mpiexec runs as a child,
 * not in tprun's place: SIGINT and SIGTERM are passed on to it (child.h)
 * and make the exit status non-zero whatever mpiexec returns (it can
 * return 0 when the signal came before the ranks started), and it is
 * killed with tprun (PR_SET_PDEATHSIG survives exec). */
static int launch(const launcher *l, int argc, char **argv)
{
    if (l->hostfile && access(l->hostfile, R_OK) != 0) {
        fprintf(stderr, "tprun: -f: cannot read the hostfile %s: %s\n", l->hostfile, strerror(errno));
        return 2;
    }
    char **args = tp_xcalloc((size_t)argc + 8, sizeof *args);
    char n[16];
    snprintf(n, sizeof n, "%d", l->ranks);
    int k = 0;
    args[k++] = "mpiexec";
    args[k++] = "-n";
    args[k++] = n;
    if (l->hostfile) {
        args[k++] = "-f";
        args[k++] = (char *)l->hostfile;
    }
    if (l->ppn) {
        args[k++] = "-ppn";
        args[k++] = (char *)l->ppn;
    }
    for (int i = 0; i < argc; i++)
        args[k++] = argv[i];
    char err[300];
    pid_t child = tp_child_start(err, sizeof err);
    if (child == 0) {
#ifdef __linux__
        prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
        execvp("mpiexec", args);
        fprintf(stderr, "tprun: cannot start mpiexec: %s; install MPICH (Debian: mpich) or launch the ranks "
                        "yourself\n", strerror(errno));
        _exit(2);
    }
    free(args);
    int status, interrupted = child < 0 ? -1 : tp_child_wait(child, &status, err, sizeof err);
    if (interrupted < 0) {
        fprintf(stderr, "tprun: cannot run mpiexec: %s\n", err);
        return 2;
    }
    if (interrupted) {
        fprintf(stderr, "tprun: interrupted (%s): the job did not finish\n", interrupted == SIGINT ? "SIGINT" : "SIGTERM");
        return 128 + interrupted;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The tasks srun started together, when this process is one of them: 0
 * outside srun. A batch script (sbatch) has SLURM_PROCID but is no step of
 * srun's (no SLURM_STEP_NUM_TASKS), and a step of one task (srun --pty
 * bash) may launch ranks itself. */
static int srun_tasks(void)
{
    const char *tasks = getenv("SLURM_STEP_NUM_TASKS");
    return getenv("SLURM_PROCID") && tasks ? atoi(tasks) : 0;
}

/* Started as one rank of a job: by mpiexec (MPICH's PMI_*, Open MPI's
 * OMPI_*, PMIx) or by srun with several tasks, which must not each launch
 * a job of their own. */
static bool under_mpi(void)
{
    return getenv("PMI_RANK") || getenv("PMI_SIZE") || getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") ||
           srun_tasks() > 1;
}

/* Whether the CUDA ranks' collectives stage through host memory
 * (tp_comm_staged) rather than run on NCCL: when --comm mpi asks, or, with
 * a warning from rank 0, where ranks share a GPU, which NCCL refuses;
 * --comm nccl there is an error (its message on rank 0, err empty on the
 * others). Collective over host, after tp_gpu_init. */
static int stage_through_host(tp_comm *host, const char *asked, bool quiet, bool *staged, char *err, size_t errlen)
{
    *staged = asked && !strcmp(asked, "mpi");
    if (*staged)
        return 0;
    char bus_id[32], sharing[300] = "";
    if (tp_gpu_bus_id(bus_id, sizeof bus_id, err, errlen) ||
        tp_gpus_shared(host, bus_id, staged, sharing, sizeof sharing, err, errlen))
        return -1;
    if (*staged && asked) {
        if (host->rank == 0)
            snprintf(err, errlen, "%s: NCCL (--comm nccl) needs one GPU per rank; give --comm mpi to stage the "
                     "collectives through host memory, or launch at most one rank per GPU", sharing);
        else
            *err = '\0';
        return -1;
    }
    if (*staged && host->rank == 0 && !quiet)
        fprintf(stderr, "tprun: warning: %s: NCCL needs one GPU per rank; collectives stage through host memory "
                        "over MPI (--comm mpi)\n", sharing);
    return 0;
}

/* A rank's processes end with their parent: the monitor with the
 * launcher (mpiexec's proxy), the rank with its monitor (monitor.h).
 * Killed with SIGKILL, a parent cannot end its child, and a rank left
 * behind would wait in a collective for peers that are gone. */
static int end_with_parent(char *err, size_t errlen)
{
#ifdef __linux__
    pid_t parent = getppid();
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
        snprintf(err, errlen, "prctl(PR_SET_PDEATHSIG) failed: %s", strerror(errno));
        return -1;
    }
    if (getppid() != parent) {     /* it died before the signal was armed */
        snprintf(err, errlen, "the parent process (%d: the launcher, or this rank's monitor) has exited",
                 (int)parent);
        return -1;
    }
#else
    (void)err;
    (void)errlen;
#endif
    return 0;
}

int main(int argc, char **argv)
{
    tp_set_program_name("tprun");
    tr_options o = {.train = tr_train_defaults()};
    launcher l = {0};
    o.threads = 1;
    o.tolerance = 1e-4;
    /* getopt_long reorders argv; -n relaunches the command line as given */
    char **given = tp_xcalloc((size_t)argc + 1, sizeof *given);
    memcpy(given, argv, (size_t)argc * sizeof *given);
    int r = parse_args(&o, &l, argc, argv);
    char err[1024];
    if (!r && tr_outputs_spare_inputs(&o, err, sizeof err)) {
        fprintf(stderr, "tprun: %s\n", err);
        r = -1;
    }
    if (r) {
        free(given);
        return r < 0 ? 2 : 0;
    }
    /* a rank of a launched job runs under its monitor, which names it if
     * it dies (monitor.h); the fork comes first, before a GPU's driver or
     * MPI has started */
    if (under_mpi()) {
        tp_rank_end end;
        int m = end_with_parent(err, sizeof err) ? -1 : tp_monitor_start(&end, err, sizeof err);
        if (m) {
            if (m < 0)
                fprintf(stderr, "tprun: %s\n", err);
            free(given);
            return m < 0 ? 2 : tp_monitor_end_as(&end);
        }
    }
    /* the backend: asked for, or cuda where a GPU is usable (--backend cpu,
     * or no driver, never loads the CUDA libraries) */
    char why[512] = "";
    bool ask = o.backend ? strcmp(o.backend, "cpu") != 0 : tp_gpu_driver_present();
    int gpus = ask ? tp_gpu_count(why, sizeof why) : 0;
    if (!o.backend)
        o.backend = gpus > 0 ? "cuda" : "cpu";
    else if (!strcmp(o.backend, "cuda") && gpus <= 0) {
        fprintf(stderr, "tprun: no CUDA device: %s (driver not found / no GPU); use --backend cpu\n", why);
        free(given);
        return 2;
    }
    if (o.comm && !strcmp(o.backend, "cpu")) {
        fprintf(stderr, "tprun: --comm chooses how the CUDA backend's ranks communicate; the cpu backend's always "
                        "use MPI: drop --comm\n");
        free(given);
        return 2;
    }
    r = l.ranks && !under_mpi() ? launch(&l, argc, given) : -1;
    free(given);
    if (r >= 0)
        return r;

    tp_comm comm;
    if (under_mpi() ? end_with_parent(err, sizeof err) || tp_comm_mpi(&comm, &argc, &argv, err, sizeof err)
                    : tp_comm_single(&comm)) {
        fprintf(stderr, "tprun: %s\n", err);
        return 2;
    }
    tp_progress_set_rank(comm.rank);
    if (comm.world == 1 && srun_tasks() > 1) {
        /* each task would run alone, as its own job of one rank */
        fprintf(stderr, "tprun: srun started %d tasks but MPI sees 1 rank: srun's process manager does not reach "
                        "MPI; run srun --mpi=pmi2 (or --mpi=pmix, as MPI was built)\n", srun_tasks());
        comm.ops->finalize(&comm);
        return 2;
    }
    if (!strcmp(o.backend, "cuda")) {
        /* a device per rank, or shared; the device communicator takes over the host one */
        tp_comm host = comm;
        bool staged = false;
        int device = tp_node_gpu(&host.node, gpus, err, sizeof err);
        if (device < 0 || tp_gpu_init(&host, device, err, sizeof err) ||
            stage_through_host(&host, o.comm, o.quiet, &staged, err, sizeof err) ||
            (staged ? tp_comm_staged : tp_comm_nccl)(&comm, &host, err, sizeof err)) {
            if (host.world > 1 && *err)
                fprintf(stderr, "tprun: rank %d: %s\n", host.rank, err);
            else if (*err)
                fprintf(stderr, "tprun: %s\n", err);
            fflush(NULL);
            if (host.world > 1 && host.ops->abort) {
                usleep(300 * 1000);
                host.ops->abort(&host, 1);
            }
            host.ops->finalize(&host);
            return 1;
        }
    }
    bool everywhere;
    int rc = tr_run(&o, &comm, &everywhere, err, sizeof err);
    if (rc && everywhere) {
        /* every rank holds this failure and returns: one says it, none aborts */
        if (comm.rank == 0)
            fprintf(stderr, "tprun: %s\n", err);
    } else if (rc) {
        fprintf(stderr, "tprun: %s\n", err);
        fflush(NULL);
        if (comm.world > 1 && comm.ops->abort) {
            /* mpiexec forwards output asynchronously and an abort discards
             * what it has not forwarded yet: give it a moment, then end the
             * ranks that may be waiting in a collective */
            usleep(300 * 1000);
            comm.ops->abort(&comm, rc);
        }
    }
    comm.ops->finalize(&comm);
    return rc;
}

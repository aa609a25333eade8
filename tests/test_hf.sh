#!/usr/bin/env bash
# test_hf.sh: models in the Hugging Face layout, out and back (moe export --format hf, moe
# import --format hf; src/convert/hf.c, hf_read.c), with no Python package beyond the standard
# library (the comparison with transformers itself is plots/hf/compare.sh, a developer tool).
#
#   1. round trip, an MoE (Mixtral), a dense model (Llama) and an MoE with a tied head
#      (model.tied=1: tie_word_embeddings true, no lm_head.weight): export --format hf, import
#      --format hf gives, bit for bit, the checkpoint that export and import in moe.c's own
#      safetensors give; its tensors are the original's, byte for byte; the folder holds
#      config.json (the architecture, the sizes, the key-value heads), model.safetensors with the
#      Hugging Face names (experts one tensor each, queries and keys with their rotary rows
#      permuted), a byte-level tokenizer.json whose vocabulary maps token i to byte i; grouped-
#      query heads of their own width out and back the same way, read from config.json alone;
#      Qwen3-MoE (model.qk_norm=head, a dense first block, unnormalised gates), OLMoE
#      (model.qk_norm=full) and DeepSeek-V3 (latent attention, sigmoid scores with aux-free
#      biases, groups, a scale, a shared expert; its latents' projections back to rounding) the
#      same way, their config.json fields, tensor names, norm gains and kv_a_proj_with_mqa checked,
#      each also from config.json alone; rope_interleave false; the experts' other name; a
#      model of 300 ids (model.vocab=300: vocab_size 300, no byte tokenizer) out and back, from
#      config.json alone too; with its tokenizer.json beside ckpt.bin, the folder holds that
#      file byte for byte, and it comes back beside the imported checkpoint (which samples the
#      original's text); a tokenizer moe.c cannot read, or of fewer tokens, is not copied (the
#      weights are, a warning says why), one of more tokens, another tokenizer.json beside
#      --out, and a run's tokenizer of another size on export are refused, nothing written
#   2. the same weights without moe_c_config (a folder transformers wrote): the settings come
#      from config.json alone, and the validation loss is the original's; also with the rotary
#      base in rope_parameters only (transformers 5's config.json)
#      and a Llama folder, imported and upcycled into 8 experts, keeps the dense model's loss
#   3. tie_word_embeddings false with an lm_head.weight gives an untied model; a tied head
#      (tie_word_embeddings, no lm_head) a tied model (model.tied = 1, no head tensor, the
#      embedding's bytes); with an lm_head.weight equal to the embedding the same checkpoint,
#      with one that differs refused (exit 2)
#   4. export refuses, exit 2, nothing written, naming the setting: sigmoid scores,
#      unnormalised or scaled gates, aux-free biases, expert choice, shared experts, dense
#      blocks among MoE ones, a capacity at evaluation, a bf16 router, sandwich norms, what
#      Qwen3-MoE, OLMoE and DeepSeek-V3 cannot express; and a folder that already holds its files
#   5. import refuses, exit 2, nothing written, naming what it cannot represent: a vocab_size
#      beyond model.vocab's range or that the embedding does not have, key-value heads the weights lack or that do not divide the heads, an odd
#      head_dim, biases, another activation or epsilon, rotary
#      scaling (rope_scaling or a rope_type), no rotary base stated, a short sliding window, another model type, a moe_c_config that disagrees with
#      config.json or is not a string, a field of another type (tie_word_embeddings in quotes),
#      (each message states the relation its numbers have), a
#      missing or extra tensor, a sharded or missing model.safetensors, bad JSON,
#      a file given as the folder; OLMoE's clip_qkv and head_dim, Qwen3-MoE's dense blocks where
#      moe.c cannot place them and its sliding window in use, DeepSeek-V3's multi-token
#      prediction layer, no q_lora_rank, no shared expert, a missing or edited correction bias,
#      two numbers of experts that disagree
#   6. eval --logits writes the first batch's tokens, targets and logits, and its loss is the
#      first batch's; an existing file is refused

# shellcheck source=tests/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
echo "test_hf: the Hugging Face layout, out and back"
moe=$(executable "${MOE_BIN:-build/moe}" "make build/moe (or set MOE_BIN)") || exit 1
command -v python3 > /dev/null || { bad "python3 (its standard library) reads the files here"; finish; }
export OMP_NUM_THREADS=1

data="$tmp/data"
"$moe" synth --out "$data" --tokens 30000 --seed 5 > /dev/null
base=(--set model.d_model=32 --set model.n_layer=2 --set model.n_head=4 --set model.seq_len=32
      --set model.d_ff=48 --set moe.d_expert=24 --set train.batch=4 --set train.eval_every=0
      --set train.steps=4 --set train.warmup=1 --set "data.train=$data/train.bin"
      --set "data.val=$data/val.bin")
train() { # NAME SETTINGS...: a tiny run in $tmp/NAME
    local name=$1
    shift
    "$moe" train --out "$tmp/$name" "${base[@]}" "$@" --quiet > "$tmp/$name.log" 2>&1
}
val_of() { "$moe" eval --ckpt "$1" --batches 2 2>&1 | sed -n 's/^val_loss \([0-9.]*\).*/\1/p'; }

# py SCRIPT ARGS...: python3's standard library on the files (safetensors header, JSON)
cat > "$tmp/st.py" << 'PY'
import json, struct, sys

def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    meta = head.pop("__metadata__", {})
    return head, meta, data

def tensor(head, data, name):
    a, b = head[name]["data_offsets"]
    return data[a:b]

def write(path, head, meta, data_of):
    # tensors in the order given, offsets recomputed
    out, blobs, off = {"__metadata__": meta} if meta else {}, [], 0
    for name, (info, blob) in data_of.items():
        out[name] = {"dtype": info["dtype"], "shape": info["shape"], "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    text = json.dumps(out).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))

cmd = sys.argv[1]
if cmd == "same-tensors":  # A B: every tensor of A is in B with the same bytes, and no other
    ha, _, da = read(sys.argv[2]); hb, _, db = read(sys.argv[3])
    bad = [n for n in ha if n not in hb or tensor(ha, da, n) != tensor(hb, db, n)] + [n for n in hb if n not in ha]
    print("ok" if not bad else "differ: " + ", ".join(bad[:5]))
elif cmd == "names":  # FILE: the tensor names, sorted
    print("\n".join(sorted(read(sys.argv[2])[0])))
elif cmd == "rope":  # MOEC.safetensors HF.safetensors C H [HKV D]: layer 0's q and k rows permuted as documented
    hm, _, dm = read(sys.argv[2]); hh, _, dh = read(sys.argv[3]); C, H = int(sys.argv[4]), int(sys.argv[5])
    HKV = int(sys.argv[6]) if len(sys.argv) > 6 else H
    D, row = (int(sys.argv[7]) if len(sys.argv) > 7 else C // H), 4 * C
    def permuted(ours, theirs, heads):
        m, h_ = tensor(hm, dm, "layers.0.attn." + ours), tensor(hh, dh, "model.layers.0.self_attn." + theirs)
        return m != h_ and len(m) == heads * D * row and all(
            h_[(h * D + half * D // 2 + i) * row:(h * D + half * D // 2 + i + 1) * row] ==
            m[(h * D + 2 * i + half) * row:(h * D + 2 * i + half + 1) * row]
            for h in range(heads) for i in range(D // 2) for half in range(2))
    q, qh = tensor(hm, dm, "layers.0.attn.wq"), tensor(hh, dh, "model.layers.0.self_attn.q_proj.weight")
    ok = permuted("wq", "q_proj.weight", H) and permuted("wk", "k_proj.weight", HKV)
    v, vh = tensor(hm, dm, "layers.0.attn.wv"), tensor(hh, dh, "model.layers.0.self_attn.v_proj.weight")
    e1, w1 = tensor(hm, dm, "layers.0.moe.w_gate"), tensor(hh, dh, "model.layers.0.block_sparse_moe.experts.1.w1.weight")
    E = hm["layers.0.moe.w_gate"]["shape"][0]
    ok = ok and v == vh and e1[len(e1) // E:2 * len(e1) // E] == w1 and q != qh
    print("ok" if ok else "not the documented permutation")
elif cmd == "gain":  # MOEC HF MOEC-NAME HF-NAME HEADS D: a norm's gain, its channels paired as the rows
    hm, _, dm = read(sys.argv[2]); hh, _, dh = read(sys.argv[3]); H, D = int(sys.argv[6]), int(sys.argv[7])
    m, h_ = tensor(hm, dm, sys.argv[4]), tensor(hh, dh, sys.argv[5])
    ok = m != h_ and len(m) == 4 * H * D and all(
        h_[4 * (h * D + half * D // 2 + i):4 * (h * D + half * D // 2 + i + 1)] ==
        m[4 * (h * D + 2 * i + half):4 * (h * D + 2 * i + half + 1)]
        for h in range(H) for i in range(D // 2) for half in range(2))
    print("ok" if ok else "not the documented permutation")
elif cmd == "close":  # A B PATTERN: every tensor of A in B with the same bytes, and no other, but
    # those whose name ends in PATTERN, which must agree to a float's rounding (relative 2.5e-7)
    import array
    ha, _, da = read(sys.argv[2]); hb, _, db = read(sys.argv[3]); pat = tuple(sys.argv[4].split(","))
    def near(n):
        x, y = array.array("f", tensor(ha, da, n)), array.array("f", tensor(hb, db, n))
        return len(x) == len(y) and all(abs(a - b) <= 2.5e-7 * abs(a) for a, b in zip(x, y))
    bad = [n for n in ha if n not in hb or not (tensor(ha, da, n) == tensor(hb, db, n) or (n.endswith(pat) and near(n)))]
    bad += [n for n in hb if n not in ha]
    print("ok" if not bad else "differ: " + ", ".join(bad[:5]))
elif cmd == "kv_a":  # MOEC HF KR R: layer 0's kv_a_proj_with_mqa: attn.wkv_a times sqrt(0.1), then attn.wk_rope as it is
    import array
    hm, _, dm = read(sys.argv[2]); hh, _, dh = read(sys.argv[3]); KR, R = int(sys.argv[4]), int(sys.argv[5])
    kv = array.array("f", tensor(hh, dh, "model.layers.0.self_attn.kv_a_proj_with_mqa.weight"))
    a = array.array("f", tensor(hm, dm, "layers.0.attn.wkv_a")); r = tensor(hm, dm, "layers.0.attn.wk_rope")
    C = len(a) // KR
    ok = len(kv) == (KR + R) * C and kv[KR * C:].tobytes() == r and all(
        abs(kv[i] - a[i] * 0.1 ** 0.5) <= 2.5e-7 * abs(a[i]) for i in range(KR * C))
    print("ok" if ok else "not wkv_a scaled over wk_rope")
elif cmd == "halves":  # FILE H D NOPE R KR: DeepSeek-V3's rotary rows from pairs (2i, 2i+1) to halves (i, i + R/2)
    h, meta, d = read(sys.argv[2]); H, D, NOPE, R, KR = map(int, sys.argv[3:8])
    def turn(blob, starts, C):
        rows = [blob[i * 4 * C:(i + 1) * 4 * C] for i in range(len(blob) // (4 * C))]
        out = rows[:]
        for s in starts:
            for i in range(R // 2):
                for half in range(2):
                    out[s + half * R // 2 + i] = rows[s + 2 * i + half]
        return b"".join(out)
    keep = {}
    for n in h:
        blob, C = tensor(h, d, n), h[n]["shape"][-1]
        if n.endswith("q_b_proj.weight") or n.endswith("q_proj.weight"):
            blob = turn(blob, [k * D + NOPE for k in range(H)], C)
        elif n.endswith("kv_a_proj_with_mqa.weight"):
            blob = turn(blob, [KR], C)
        keep[n] = (h[n], blob)
    write(sys.argv[2], h, {"format": "pt"}, keep)
elif cmd == "shape":  # FILE NAME: the tensor's shape
    print(read(sys.argv[2])[0][sys.argv[3]]["shape"])
elif cmd == "tokenizer":  # tokenizer.json: token i is byte i's character (GPT-2's table)
    vocab = json.load(open(sys.argv[2]))["model"]["vocab"]
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    want = {chr(c): b for b, c in zip(bs, cs)}
    print("ok" if vocab == want else "not the byte table")
elif cmd == "edit":  # config.json KEY JSON-VALUE (null deletes)
    path, key, value = sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    c = json.load(open(path))
    if value is None: c.pop(key, None)
    else: c[key] = value
    json.dump(c, open(path, "w"), indent=1)
elif cmd == "drop":  # FILE NAME: the file without tensor NAME (and without its checksum)
    h, meta, d = read(sys.argv[2])
    keep = {n: (h[n], tensor(h, d, n)) for n in h if n != sys.argv[3]}
    write(sys.argv[2], h, {"format": "pt"}, keep)
elif cmd == "copy":  # FILE SRC DST: tensor DST holds SRC's bytes (the same shape)
    h, meta, d = read(sys.argv[2])
    keep = {n: (h[n], tensor(h, d, sys.argv[3] if n == sys.argv[4] else n)) for n in h}
    write(sys.argv[2], h, {"format": "pt"}, keep)
elif cmd == "fill":  # FILE NAME VALUE: tensor NAME's floats all VALUE
    h, meta, d = read(sys.argv[2])
    keep = {n: (h[n], tensor(h, d, n)) for n in h}
    keep[sys.argv[3]] = (h[sys.argv[3]], struct.pack("<f", float(sys.argv[4])) * (len(keep[sys.argv[3]][1]) // 4))
    write(sys.argv[2], h, {"format": "pt"}, keep)
elif cmd == "add":  # FILE NAME: the file with one more (4,) tensor NAME
    h, meta, d = read(sys.argv[2])
    keep = {n: (h[n], tensor(h, d, n)) for n in h}
    keep[sys.argv[3]] = ({"dtype": "F32", "shape": [4]}, b"\0" * 16)
    write(sys.argv[2], h, {"format": "pt"}, keep)
PY
py() { python3 "$tmp/st.py" "$@"; }

# ---- 1. round trip ---------------------------------------------------------------------
echo "test_hf: round trip"
train moe
train dense --set moe.num_experts=0
train moe-tied --set model.tied=1
for kind in moe dense moe-tied; do
    arch=MixtralForCausalLM tie=false head="an untied head"
    [ $kind = dense ] && arch=LlamaForCausalLM
    [ $kind = moe-tied ] && tie=true head="a tied head"
    "$moe" export --ckpt "$tmp/$kind/ckpt.bin" --format hf --out "$tmp/hf-$kind" > "$tmp/out" 2>&1 &&
        "$moe" import --format hf --from "$tmp/hf-$kind" --out "$tmp/$kind-hf.bin" > "$tmp/out2" 2>&1 &&
        "$moe" export --ckpt "$tmp/$kind/ckpt.bin" --out "$tmp/$kind.st" > /dev/null 2>&1 &&
        "$moe" import --from "$tmp/$kind.st" --out "$tmp/$kind-st.bin" > /dev/null 2>&1 &&
        cmp -s "$tmp/$kind-hf.bin" "$tmp/$kind-st.bin"
    check "$kind: export --format hf then import --format hf = export then import, bit for bit" $? \
        "$(cat "$tmp/out" "$tmp/out2")"
    "$moe" export --ckpt "$tmp/$kind-hf.bin" --out "$tmp/$kind-back.st" > /dev/null 2>&1
    got=$(py same-tensors "$tmp/$kind.st" "$tmp/$kind-back.st" 2>&1)
    [ "$got" = ok ]
    check "$kind: the imported tensors are the original's, byte for byte" $? "$got"
    grep -q "\"architectures\": \[\"$arch\"\]" "$tmp/hf-$kind/config.json" &&
        grep -q '"vocab_size": 256,' "$tmp/hf-$kind/config.json" &&
        grep -q '"num_key_value_heads": 4,' "$tmp/hf-$kind/config.json" &&
        grep -q "\"tie_word_embeddings\": $tie," "$tmp/hf-$kind/config.json"
    check "$kind: config.json says $arch, 256 bytes, 4 key-value heads, $head" $? \
        "$(head -n 12 "$tmp/hf-$kind/config.json")"
    got=$(py tokenizer "$tmp/hf-$kind/tokenizer.json" 2>&1)
    [ "$got" = ok ]
    check "$kind: tokenizer.json maps token i to byte i (GPT-2's byte table, no merges)" $? "$got"
done
names=$(py names "$tmp/hf-moe/model.safetensors")
grep -qx 'model.layers.1.block_sparse_moe.experts.7.w2.weight' <<< "$names" &&
    grep -qx 'model.layers.0.block_sparse_moe.gate.weight' <<< "$names" &&
    grep -qx 'lm_head.weight' <<< "$names" && [ "$(wc -l <<< "$names")" -eq $((3 + 2 * (2 + 4 + 1 + 3 * 8))) ]
check "the MoE's tensors under Hugging Face names: 3 + 2 x (2 norms, 4 attention, router, 24 experts)" \
    $? "$(head -n 5 <<< "$names")"
names=$(py names "$tmp/hf-moe-tied/model.safetensors")
"$moe" info --ckpt "$tmp/moe-tied-hf.bin" > "$tmp/info" 2>&1
! grep -qx 'lm_head.weight' <<< "$names" && [ "$(wc -l <<< "$names")" -eq $((2 + 2 * (2 + 4 + 1 + 3 * 8))) ] &&
    grep -qx 'model.tied = 1' "$tmp/info" && ! grep -q '^head ' "$tmp/info"
check "a tied MoE: no lm_head.weight written, and imported back as a tied model (model.tied = 1, no head)" \
    $? "$(grep -c . <<< "$names") tensors; $(grep -e tied -e '^head' "$tmp/info")"
got=$(py rope "$tmp/moe.st" "$tmp/hf-moe/model.safetensors" 32 4 2>&1)
[ "$got" = ok ]
check "queries' rows permuted from pairs (2i, 2i+1) to (i, i + D/2); values and experts as they are" $? "$got"

# grouped-query attention (Mixtral's 8 key-value heads for 32 query heads, in small): 4 query
# heads on 2 key-value heads, heads of 12 channels (not d_model / n_head = 8)
train gqa --set model.kv_heads=2 --set model.head_dim=12
"$moe" export --ckpt "$tmp/gqa/ckpt.bin" --format hf --out "$tmp/hf-gqa" > "$tmp/out" 2>&1 &&
    "$moe" import --format hf --from "$tmp/hf-gqa" --out "$tmp/gqa-hf.bin" > "$tmp/out2" 2>&1 &&
    "$moe" export --ckpt "$tmp/gqa/ckpt.bin" --out "$tmp/gqa.st" > /dev/null 2>&1 &&
    "$moe" import --from "$tmp/gqa.st" --out "$tmp/gqa-st.bin" > /dev/null 2>&1 &&
    cmp -s "$tmp/gqa-hf.bin" "$tmp/gqa-st.bin" &&
    grep -q '"num_key_value_heads": 2,' "$tmp/hf-gqa/config.json" &&
    grep -q '"head_dim": 12,' "$tmp/hf-gqa/config.json"
check "grouped-query heads of 12: out and back bit for bit; config.json says 2 key-value heads of 12" \
    $? "$(cat "$tmp/out" "$tmp/out2")"
got=$(py rope "$tmp/gqa.st" "$tmp/hf-gqa/model.safetensors" 32 4 2 12 2>&1)
[ "$got" = ok ]
check "grouped-query heads: the 4 query heads' and the 2 key heads' rotary rows permuted" $? "$got"
cp -r "$tmp/hf-gqa" "$tmp/bare-gqa"
py edit "$tmp/bare-gqa/config.json" moe_c_config null
"$moe" import --format hf --from "$tmp/bare-gqa" --out "$tmp/bare-gqa.bin" --set "data.val=$data/val.bin" \
    --set train.batch=4 > "$tmp/out" 2>&1 &&
    [ "$(val_of "$tmp/bare-gqa.bin")" = "$(val_of "$tmp/gqa/ckpt.bin")" ] &&
    "$moe" info --ckpt "$tmp/bare-gqa.bin" 2>&1 | grep -q "kv_heads.*2"
check "grouped-query heads from config.json alone: model.kv_heads 2, the same validation loss" $? \
    "$(cat "$tmp/out")"

# Qwen3-MoE (model.qk_norm=head: a norm on each head of the queries and keys, its gain shared by
# the heads) with grouped heads of their own width, a dense first block (mlp_only_layers) and
# gates left unnormalised (norm_topk_prob false); OLMoE (model.qk_norm=full: a norm over the whole
# projection)
train qwen3 --set model.qk_norm=head --set model.kv_heads=2 --set model.head_dim=12 \
    --set model.n_layer=3 --set moe.first_dense=1 --set moe.norm_topk=0
train olmoe --set model.qk_norm=full --set model.kv_heads=2
for kind in qwen3 olmoe; do
    "$moe" export --ckpt "$tmp/$kind/ckpt.bin" --format hf --out "$tmp/hf-$kind" > "$tmp/out" 2>&1 &&
        "$moe" import --format hf --from "$tmp/hf-$kind" --out "$tmp/$kind-hf.bin" > "$tmp/out2" 2>&1 &&
        "$moe" export --ckpt "$tmp/$kind/ckpt.bin" --out "$tmp/$kind.st" > /dev/null 2>&1 &&
        "$moe" import --from "$tmp/$kind.st" --out "$tmp/$kind-st.bin" > /dev/null 2>&1 &&
        cmp -s "$tmp/$kind-hf.bin" "$tmp/$kind-st.bin"
    check "$kind: export --format hf then import --format hf = export then import, bit for bit" $? \
        "$(cat "$tmp/out" "$tmp/out2")"
    cp -r "$tmp/hf-$kind" "$tmp/bare-$kind"
    py edit "$tmp/bare-$kind/config.json" moe_c_config null
    "$moe" import --format hf --from "$tmp/bare-$kind" --out "$tmp/bare-$kind.bin" --set "data.val=$data/val.bin" \
        --set train.batch=4 > "$tmp/out" 2>&1 &&
        a=$(val_of "$tmp/$kind/ckpt.bin") && [ -n "$a" ] && [ "$(val_of "$tmp/bare-$kind.bin")" = "$a" ]
    check "$kind: from config.json alone, the validation loss is the original's ($a)" $? "$(cat "$tmp/out")"
done
# transformers' save_pretrained writes Qwen3-MoE's number of experts as num_local_experts
cp -r "$tmp/bare-qwen3" "$tmp/alias-qwen3"
py edit "$tmp/alias-qwen3/config.json" num_experts null
py edit "$tmp/alias-qwen3/config.json" num_local_experts 8
"$moe" import --format hf --from "$tmp/alias-qwen3" --out "$tmp/alias-qwen3.bin" > "$tmp/out" 2>&1 &&
    "$moe" export --ckpt "$tmp/alias-qwen3.bin" --out "$tmp/alias-qwen3.st" > /dev/null 2>&1 &&
    got=$(py same-tensors "$tmp/alias-qwen3.st" "$tmp/qwen3.st") && [ "$got" = ok ]
check "qwen3: the experts counted by num_local_experts (as transformers saves it) import the same" $? \
    "$got $(cat "$tmp/out")"
cfg=$tmp/hf-qwen3/config.json
for field in '"architectures": \["Qwen3MoeForCausalLM"\]' '"model_type": "qwen3_moe"' '"num_experts": 8,' \
    '"moe_intermediate_size": 24,' '"intermediate_size": 48,' '"norm_topk_prob": false,' \
    '"mlp_only_layers": \[0\],' '"decoder_sparse_step": 1,' '"num_key_value_heads": 2,' '"head_dim": 12,'; do
    grep -q "$field" "$cfg" || break
done
check "qwen3: config.json says Qwen3MoeForCausalLM, 8 experts of 24, dense blocks of 48 (block 0), unnormalised gates, 2 key-value heads of 12" \
    $? "missing $field: $(head -n 30 "$cfg")"
cfg=$tmp/hf-olmoe/config.json
grep -q '"architectures": \["OlmoeForCausalLM"\]' "$cfg" && grep -q '"model_type": "olmoe"' "$cfg" &&
    grep -q '"num_experts": 8,' "$cfg" && grep -q '"intermediate_size": 24,' "$cfg" &&
    grep -q '"norm_topk_prob": true,' "$cfg" && grep -q '"clip_qkv": null,' "$cfg" &&
    grep -q '"num_key_value_heads": 2,' "$cfg"
check "olmoe: config.json says OlmoeForCausalLM, 8 experts of 24, renormalised gates, no clipping, 2 key-value heads" \
    $? "$(head -n 30 "$cfg")"
names=$(py names "$tmp/hf-qwen3/model.safetensors")
grep -qx 'model.layers.0.mlp.gate_proj.weight' <<< "$names" && grep -qx 'model.layers.1.mlp.gate.weight' <<< "$names" &&
    grep -qx 'model.layers.2.mlp.experts.7.down_proj.weight' <<< "$names" &&
    grep -qx 'model.layers.1.self_attn.k_norm.weight' <<< "$names" &&
    [ "$(wc -l <<< "$names")" -eq $((3 + (2 + 4 + 2 + 3) + 2 * (2 + 4 + 2 + 1 + 24))) ] &&
    [ "$(py shape "$tmp/hf-qwen3/model.safetensors" model.layers.0.self_attn.q_norm.weight)" = "[12]" ]
check "qwen3: the tensors under Qwen3-MoE's names (mlp.gate, mlp.experts.E.*_proj, a dense block's mlp.*_proj, q_norm of a head's 12)" \
    $? "$(head -n 5 <<< "$names")"
names=$(py names "$tmp/hf-olmoe/model.safetensors")
grep -qx 'model.layers.1.mlp.experts.7.up_proj.weight' <<< "$names" &&
    [ "$(wc -l <<< "$names")" -eq $((3 + 2 * (2 + 4 + 2 + 1 + 24))) ] &&
    [ "$(py shape "$tmp/hf-olmoe/model.safetensors" model.layers.0.self_attn.q_norm.weight)" = "[32]" ] &&
    [ "$(py shape "$tmp/hf-olmoe/model.safetensors" model.layers.0.self_attn.k_norm.weight)" = "[16]" ]
check "olmoe: the tensors under OLMoE's names, q_norm over the whole projection (32), k_norm over the key heads' (16)" \
    $? "$(head -n 5 <<< "$names")"
got=$(py gain "$tmp/qwen3.st" "$tmp/hf-qwen3/model.safetensors" layers.0.attn.q_norm model.layers.0.self_attn.q_norm.weight 1 12 2>&1)
[ "$got" = ok ]
check "qwen3: the norm's gain on a head's queries, its channels permuted as the rotary rows" $? "$got"
got=$(py gain "$tmp/olmoe.st" "$tmp/hf-olmoe/model.safetensors" layers.0.attn.k_norm model.layers.0.self_attn.k_norm.weight 2 8 2>&1)
[ "$got" = ok ]
check "olmoe: the norm's gain on the keys, each key head's channels permuted as its rotary rows" $? "$got"

# DeepSeek-V3 (model.attention=mla): latent attention with a latent for the queries too, sigmoid
# scores with aux-free biases (e_score_correction_bias), group-limited routing, a scale, a shared
# expert, a dense first block. Its latents' projections are written scaled (transformers
# normalises the latents with an epsilon of 1e-6, moe.c with 1e-5), so those two come back to a
# float's rounding, every other tensor bit for bit
mla=(--set model.attention=mla --set mla.q_rank=12 --set mla.kv_rank=8 --set mla.rope_dim=4
     --set mla.nope_dim=6 --set mla.v_dim=10)
train deepseek "${mla[@]}" --set model.n_layer=3 --set moe.score=sigmoid --set moe.balance=aux_free \
    --set moe.num_shared=1 --set moe.n_group=4 --set moe.topk_group=2 --set moe.first_dense=1 \
    --set moe.route_scale=2.5
"$moe" export --ckpt "$tmp/deepseek/ckpt.bin" --format hf --out "$tmp/hf-deepseek" > "$tmp/out" 2>&1 &&
    "$moe" import --format hf --from "$tmp/hf-deepseek" --out "$tmp/deepseek-hf.bin" > "$tmp/out2" 2>&1 &&
    "$moe" export --ckpt "$tmp/deepseek/ckpt.bin" --out "$tmp/deepseek.st" > /dev/null 2>&1 &&
    "$moe" export --ckpt "$tmp/deepseek-hf.bin" --out "$tmp/deepseek-back.st" > /dev/null 2>&1 &&
    got=$(py close "$tmp/deepseek.st" "$tmp/deepseek-back.st" attn.wq_a,attn.wkv_a 2>&1) && [ "$got" = ok ] &&
    [ "$(py names "$tmp/deepseek-back.st" | grep -c 'moe.router_bias$')" -eq 2 ]
check "deepseek: out and back, every tensor and aux-free bias bit for bit but the latents' projections, to rounding" \
    $? "$got $(cat "$tmp/out" "$tmp/out2")"
a=$(val_of "$tmp/deepseek/ckpt.bin")
[ -n "$a" ] && [ "$(val_of "$tmp/deepseek-hf.bin")" = "$a" ]
check "deepseek: out and back, the validation loss is the original's ($a)" $? "$(val_of "$tmp/deepseek-hf.bin")"
cfg=$tmp/hf-deepseek/config.json
for field in '"architectures": \["DeepseekV3ForCausalLM"\]' '"model_type": "deepseek_v3"' \
    '"n_routed_experts": 8,' '"n_shared_experts": 1,' '"moe_intermediate_size": 24,' \
    '"intermediate_size": 48,' '"first_k_dense_replace": 1,' '"routed_scaling_factor": 2.5,' \
    '"n_group": 4,' '"topk_group": 2,' '"norm_topk_prob": true,' '"q_lora_rank": 12,' \
    '"kv_lora_rank": 8,' '"qk_rope_head_dim": 4,' '"qk_nope_head_dim": 6,' '"v_head_dim": 10,' \
    '"rope_interleave": true,' '"num_nextn_predict_layers": 0,' '"num_key_value_heads": 4,'; do
    grep -q "$field" "$cfg" || break
done
check "deepseek: config.json says DeepseekV3ForCausalLM, 8 experts of 24 and one shared, a dense block of 48, groups, scale, the latent ranks and head sizes" \
    $? "missing $field: $(head -n 40 "$cfg")"
names=$(py names "$tmp/hf-deepseek/model.safetensors")
grep -qx 'model.layers.0.mlp.gate_proj.weight' <<< "$names" &&
    grep -qx 'model.layers.1.mlp.gate.e_score_correction_bias' <<< "$names" &&
    grep -qx 'model.layers.2.mlp.experts.7.down_proj.weight' <<< "$names" &&
    grep -qx 'model.layers.1.mlp.shared_experts.up_proj.weight' <<< "$names" &&
    grep -qx 'model.layers.0.self_attn.q_a_layernorm.weight' <<< "$names" &&
    grep -qx 'model.layers.0.self_attn.kv_b_proj.weight' <<< "$names" &&
    [ "$(wc -l <<< "$names")" -eq $((3 + (2 + 7 + 3) + 2 * (2 + 7 + 2 + 24 + 3))) ] &&
    [ "$(py shape "$tmp/hf-deepseek/model.safetensors" model.layers.0.self_attn.kv_a_proj_with_mqa.weight)" = "[12, 32]" ]
check "deepseek: the tensors under DeepSeek-V3's names (q_a_proj, kv_a_proj_with_mqa of 8 + 4 rows, kv_b_proj, the router's correction bias, shared_experts)" \
    $? "$(head -n 5 <<< "$names")"
got=$(py kv_a "$tmp/deepseek.st" "$tmp/hf-deepseek/model.safetensors" 8 4 2>&1)
[ "$got" = ok ]
check "deepseek: kv_a_proj_with_mqa is attn.wkv_a times sqrt(0.1) over attn.wk_rope as it is" $? "$got"
cp -r "$tmp/hf-deepseek" "$tmp/bare-deepseek"
py edit "$tmp/bare-deepseek/config.json" moe_c_config null
"$moe" import --format hf --from "$tmp/bare-deepseek" --out "$tmp/bare-deepseek.bin" --set "data.val=$data/val.bin" \
    --set train.batch=4 > "$tmp/out" 2>&1 && [ "$(val_of "$tmp/bare-deepseek.bin")" = "$a" ] &&
    "$moe" info --ckpt "$tmp/bare-deepseek.bin" 2>&1 | grep -q "balance = aux_free"
check "deepseek: from config.json alone, aux-free biases and the validation loss the original's ($a)" $? \
    "$(cat "$tmp/out")"
# rope_interleave false: the rotary rows paired by halves, as other checkpoints have them
cp -r "$tmp/bare-deepseek" "$tmp/halves"
py edit "$tmp/halves/config.json" rope_interleave false
py halves "$tmp/halves/model.safetensors" 4 10 6 4 8
"$moe" import --format hf --from "$tmp/halves" --out "$tmp/halves.bin" > "$tmp/out" 2>&1 &&
    "$moe" export --ckpt "$tmp/halves.bin" --out "$tmp/halves.st" > /dev/null 2>&1 &&
    "$moe" export --ckpt "$tmp/bare-deepseek.bin" --out "$tmp/bare-deepseek.st" > /dev/null 2>&1 &&
    got=$(py same-tensors "$tmp/halves.st" "$tmp/bare-deepseek.st") && [ "$got" = ok ]
check "deepseek: rope_interleave false, its rotary rows paired by halves, is the same model, bit for bit" $? \
    "$got $(cat "$tmp/out")"

# a model of moe.c's without aux-free biases (moe.balance=aux) is written with zero correction
# biases and comes back without them; hidden_size / num_attention_heads (36 / 4 = 9, odd) does
# not matter to latent attention, whose heads have sizes of their own
train deepseek-aux "${mla[@]}" --set model.d_model=36 --set moe.score=sigmoid --set moe.num_shared=1
"$moe" export --ckpt "$tmp/deepseek-aux/ckpt.bin" --format hf --out "$tmp/hf-deepseek-aux" > "$tmp/out" 2>&1 &&
    "$moe" import --format hf --from "$tmp/hf-deepseek-aux" --out "$tmp/deepseek-aux.bin" > "$tmp/out" 2>&1 &&
    "$moe" info --ckpt "$tmp/deepseek-aux.bin" 2>&1 | grep -q "balance = aux$" &&
    a=$(val_of "$tmp/deepseek-aux/ckpt.bin") && [ "$(val_of "$tmp/deepseek-aux.bin")" = "$a" ]
check "deepseek without aux-free biases: zero correction biases out, a model without them back, the same loss" \
    $? "$(cat "$tmp/out")"
cp -r "$tmp/hf-deepseek-aux" "$tmp/bare-deepseek-aux"
py edit "$tmp/bare-deepseek-aux/config.json" moe_c_config null
"$moe" import --format hf --from "$tmp/bare-deepseek-aux" --out "$tmp/bare-deepseek-aux.bin" \
    --set "data.val=$data/val.bin" --set train.batch=4 > "$tmp/out" 2>&1 &&
    [ "$(val_of "$tmp/bare-deepseek-aux.bin")" = "$a" ]
check "deepseek: a hidden_size of 36 for 4 heads (latent attention's heads are mla's sizes) imports from config.json alone" \
    $? "$(cat "$tmp/out")"

# a vocabulary of its own (model.vocab=300, from shards of 2-byte ids): vocab_size says it, the
# byte tokenizer is not written (its ids are not bytes), and it comes back bit for bit, from
# moe_c_config and from config.json alone (the same validation loss)
"$moe" synth --out "$tmp/data300" --tokens 20000 --seed 5 --vocab 300 > /dev/null
train v300 --set model.vocab=300 --set "data.train=$tmp/data300/train.bin" \
    --set "data.val=$tmp/data300/val.bin"
"$moe" export --ckpt "$tmp/v300/ckpt.bin" --format hf --out "$tmp/hf-v300" > "$tmp/out" 2>&1 &&
    "$moe" import --format hf --from "$tmp/hf-v300" --out "$tmp/v300-hf.bin" > "$tmp/out2" 2>&1 &&
    "$moe" export --ckpt "$tmp/v300/ckpt.bin" --out "$tmp/v300.st" > /dev/null 2>&1 &&
    "$moe" import --from "$tmp/v300.st" --out "$tmp/v300-st.bin" > /dev/null 2>&1 &&
    cmp -s "$tmp/v300-hf.bin" "$tmp/v300-st.bin" &&
    grep -q '"vocab_size": 300,' "$tmp/hf-v300/config.json" &&
    [ ! -e "$tmp/hf-v300/tokenizer.json" ] && [ ! -e "$tmp/hf-v300/tokenizer_config.json" ]
check "model.vocab=300: out and back bit for bit; vocab_size 300, no byte tokenizer written" $? \
    "$(cat "$tmp/out" "$tmp/out2"; ls "$tmp/hf-v300")"
cp -r "$tmp/hf-v300" "$tmp/bare-v300"
py edit "$tmp/bare-v300/config.json" moe_c_config null
"$moe" import --format hf --from "$tmp/bare-v300" --out "$tmp/bare-v300.bin" \
    --set "data.val=$tmp/data300/val.bin" --set train.batch=4 > "$tmp/out" 2>&1
rc=$?
a=$(val_of "$tmp/v300/ckpt.bin")
b=$(val_of "$tmp/bare-v300.bin")
[ $rc -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ]
check "model.vocab=300 from config.json alone (vocab_size): the validation loss is the original's ($a = $b)" \
    $? "status $rc: $(cat "$tmp/out")"

# the run's own tokenizer (a tokenizer.json of 300 tokens beside its ckpt.bin) goes into the
# folder byte for byte, and comes back beside the imported checkpoint, which is the original's bit
# for bit and samples the original's text
seq 1 2000 | awk '{ print "item " $1 " of the list, number " $1 * 7 ", naïve café" }' > "$tmp/words.txt"
for v in 280 300 310; do
    "$moe" tokenizer train --vocab $v --from "$tmp/words.txt" --out "$tmp/tok$v.json" > /dev/null 2>&1
done
cp "$tmp/tok300.json" "$tmp/v300/tokenizer.json"
mkdir -p "$tmp/v300-back"
"$moe" export --ckpt "$tmp/v300/ckpt.bin" --format hf --out "$tmp/hf-v300t" > "$tmp/out" 2>&1 &&
    "$moe" import --format hf --from "$tmp/hf-v300t" --out "$tmp/v300-back/ckpt.bin" > "$tmp/out2" 2>&1 &&
    cmp -s "$tmp/hf-v300t/tokenizer.json" "$tmp/tok300.json" && [ -e "$tmp/hf-v300t/tokenizer_config.json" ] &&
    grep -q '"vocab_size": 300,' "$tmp/hf-v300t/config.json" &&
    cmp -s "$tmp/v300-back/tokenizer.json" "$tmp/tok300.json" && cmp -s "$tmp/v300-back/ckpt.bin" "$tmp/v300-st.bin" &&
    grep -q "tokenizer.json, tokenizer_config.json" "$tmp/out" && grep -q "and its tokenizer $tmp/v300-back/tokenizer.json" "$tmp/out2"
check "model.vocab=300 with its tokenizer.json: out and back bit for bit, the tokenizer file too" $? \
    "$(cat "$tmp/out" "$tmp/out2"; ls "$tmp/hf-v300t" "$tmp/v300-back")"
a=$("$moe" sample --ckpt "$tmp/v300/ckpt.bin" --prompt "item 12" --tokens 20 --temperature 0 2>&1)
b=$("$moe" sample --ckpt "$tmp/v300-back/ckpt.bin" --prompt "item 12" --tokens 20 --temperature 0 2>&1)
[ -n "$a" ] && [ "$a" = "$b" ]
check "the imported checkpoint samples the original's text through the copied tokenizer" $? "$a / $b"
# import_tok LABEL NAME TOKENIZER: the folder hf-v300t with another tokenizer.json, imported
# into a folder of its own: its exit status in rc, its output in out
import_tok() {
    cp -r "$tmp/hf-v300t" "$tmp/hf-$1"
    cp "$2" "$tmp/hf-$1/tokenizer.json"
    mkdir -p "$tmp/imp-$1"
    out=$("$moe" import --format hf --from "$tmp/hf-$1" --out "$tmp/imp-$1/ckpt.bin" 2>&1)
    rc=$?
}
sed 's/"normalizer": null/"normalizer": {"type": "NFKC"}/' "$tmp/tok300.json" > "$tmp/nfkc.json"
import_tok nfkc "$tmp/nfkc.json"
[ $rc = 0 ] && [ -e "$tmp/imp-nfkc/ckpt.bin" ] && [ ! -e "$tmp/imp-nfkc/tokenizer.json" ] &&
    grep -q 'warning: the folder.s tokenizer was not copied: .*normalizer is of type "NFKC"' <<< "$out"
check "a tokenizer moe.c cannot read (a normalizer other than NFC): the weights imported, the tokenizer not, a warning says why" \
    $? "exit $rc: $out"
sed 's/"normalizer": null/"normalizer": {"type": "NFC"}/' "$tmp/tok300.json" > "$tmp/nfc.json"
import_tok nfc "$tmp/nfc.json"
[ $rc = 0 ] && cmp -s "$tmp/nfc.json" "$tmp/imp-nfc/tokenizer.json" && [[ $out != *warning* ]]
check "a Qwen-style tokenizer (the normalizer NFC): imported with the checkpoint, byte for byte" \
    $? "exit $rc: $out"
import_tok small "$tmp/tok280.json"
[ $rc = 0 ] && [ -e "$tmp/imp-small/ckpt.bin" ] && [ ! -e "$tmp/imp-small/tokenizer.json" ] &&
    grep -q "warning: .*has 280 tokens, the model's vocab_size 300" <<< "$out"
check "a tokenizer of fewer tokens than vocab_size (padded rows): imported without it, a warning says so" \
    $? "exit $rc: $out"
import_tok large "$tmp/tok310.json"
[ $rc = 2 ] && [ -z "$(ls "$tmp/imp-large")" ] && grep -q "has 310 tokens, but the model's vocab_size is 300" <<< "$out"
check "a tokenizer of more tokens than vocab_size: exit 2, nothing written" $? "exit $rc: $out"
cp "$tmp/tok310.json" "$tmp/imp-small/tokenizer.json"
out=$("$moe" import --format hf --from "$tmp/hf-v300t" --out "$tmp/imp-small/ckpt2.bin" 2>&1)
rc=$?
[ $rc = 2 ] && [ ! -e "$tmp/imp-small/ckpt2.bin" ] && cmp -s "$tmp/imp-small/tokenizer.json" "$tmp/tok310.json" &&
    grep -q "tokenizer.json already exists beside --out" <<< "$out"
check "another tokenizer.json beside --out: exit 2, nothing written or changed" $? "exit $rc: $out"
cp "$tmp/tok310.json" "$tmp/v300/tokenizer.json"
out=$("$moe" export --ckpt "$tmp/v300/ckpt.bin" --format hf --out "$tmp/hf-v310" 2>&1)
rc=$?
cp "$tmp/tok300.json" "$tmp/v300/tokenizer.json"
[ $rc = 2 ] && [ ! -e "$tmp/hf-v310" ] && grep -q "model.vocab=300, but the tokenizer beside it, .* has 310 tokens" <<< "$out"
check "export of a run whose tokenizer.json has another size than model.vocab: exit 2, nothing written" $? \
    "exit $rc: $out"

# ---- 2. without moe_c_config -----------------------------------------------------------
echo "test_hf: a folder without moe.c's settings"
for kind in moe dense; do
    cp -r "$tmp/hf-$kind" "$tmp/bare-$kind"
    py edit "$tmp/bare-$kind/config.json" moe_c_config null
    "$moe" import --format hf --from "$tmp/bare-$kind" --out "$tmp/bare-$kind.bin" --set "data.val=$data/val.bin" \
        --set train.batch=4 > "$tmp/out" 2>&1
    rc=$?
    a=$(val_of "$tmp/$kind/ckpt.bin")
    b=$(val_of "$tmp/bare-$kind.bin")
    [ $rc -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ]
    check "$kind: from config.json alone, the validation loss is the original's ($a = $b)" $? \
        "status $rc: $(cat "$tmp/out")"
done

cp -r "$tmp/bare-moe" "$tmp/v5"
py edit "$tmp/v5/config.json" rope_theta null
"$moe" import --format hf --from "$tmp/v5" --out "$tmp/v5.bin" --set "data.val=$data/val.bin" \
    --set train.batch=4 > "$tmp/out" 2>&1
rc=$?
b=$(val_of "$tmp/v5.bin")
[ $rc -eq 0 ] && [ -n "$b" ] && [ "$b" = "$(val_of "$tmp/moe/ckpt.bin")" ]
check "the rotary base from rope_parameters alone (transformers 5's spelling): the same loss" $? \
    "status $rc: $b $(cat "$tmp/out")"

# a dense model from the Hugging Face layout, upcycled into an MoE
"$moe" import --format hf --from "$tmp/bare-dense" --out "$tmp/llama.bin" \
    --set "data.val=$data/val.bin" --set train.batch=4 > /dev/null 2>&1 &&
    "$moe" upcycle --from "$tmp/llama.bin" --out "$tmp/llama-moe.bin" --set moe.num_experts=8 \
        --set moe.d_expert=48 > "$tmp/out" 2>&1 &&
    [ "$(val_of "$tmp/llama-moe.bin")" = "$(val_of "$tmp/dense/ckpt.bin")" ]
check "a Llama folder imported and upcycled (moe.num_experts=8): the dense model's loss" $? \
    "$(cat "$tmp/out")"

# ---- 3. a tied head ---------------------------------------------------------------------
"$moe" info --ckpt "$tmp/bare-dense.bin" > "$tmp/info" 2>&1
grep -qx 'model.tied = 0' "$tmp/info" && grep -q '^head  *256 x 32 ' "$tmp/info"
check "tie_word_embeddings false with an lm_head.weight: an untied model (model.tied = 0, its head)" $? \
    "$(grep -e tied -e '^head' "$tmp/info")"
cp -r "$tmp/bare-dense" "$tmp/tied"
py edit "$tmp/tied/config.json" tie_word_embeddings true
py drop "$tmp/tied/model.safetensors" lm_head.weight
"$moe" import --format hf --from "$tmp/tied" --out "$tmp/tied.bin" > "$tmp/out" 2>&1
rc=$?
"$moe" export --ckpt "$tmp/tied.bin" --out "$tmp/tied.st" > /dev/null 2>&1
"$moe" info --ckpt "$tmp/tied.bin" > "$tmp/info" 2>&1
same=$(python3 - "$tmp/tied.st" "$tmp/tied/model.safetensors" << 'PY'
import json, struct, sys
def read(path):
    f = open(path, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); d = f.read()
    return h, lambda k: d[h[k]["data_offsets"][0]:h[k]["data_offsets"][1]]
h, t = read(sys.argv[1])
hf, thf = read(sys.argv[2])
print("head" not in h and t("tok_emb") == thf("model.embed_tokens.weight"))
PY
)
[ $rc -eq 0 ] && [ "$same" = True ] && grep -qx 'model.tied = 1' "$tmp/info"
check "a tied head (no lm_head) is imported as a tied model: model.tied = 1, no head, the embedding's bytes" $? \
    "status $rc: $same $(cat "$tmp/out") $(grep tied "$tmp/info")"
# tied, and an lm_head.weight as well: transformers computes with the embedding, so the file's
# lm_head.weight is taken when it is the embedding, and refused when it differs
cp -r "$tmp/bare-dense" "$tmp/tied-same"
py edit "$tmp/tied-same/config.json" tie_word_embeddings true
py copy "$tmp/tied-same/model.safetensors" model.embed_tokens.weight lm_head.weight
"$moe" import --format hf --from "$tmp/tied-same" --out "$tmp/tied-same.bin" > "$tmp/out" 2>&1
rc=$?
"$moe" import --format hf --from "$tmp/tied" --out "$tmp/tied-again.bin" > /dev/null 2>&1
[ $rc -eq 0 ] && cmp -s "$tmp/tied.bin" "$tmp/tied-same.bin" && cmp -s "$tmp/tied.bin" "$tmp/tied-again.bin"
check "tied, with an lm_head.weight equal to the embedding: the same checkpoint as without it" $? \
    "status $rc: $(cat "$tmp/out")"
cp -r "$tmp/bare-dense" "$tmp/tied-other"
py edit "$tmp/tied-other/config.json" tie_word_embeddings true
"$moe" import --format hf --from "$tmp/tied-other" --out "$tmp/tied-other.bin" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "lm_head.weight that differs" "$tmp/out" &&
    grep -q "tie_word_embeddings to false" "$tmp/out" && [ ! -e "$tmp/tied-other.bin" ]
check "tied, with an lm_head.weight that is not the embedding: exit 2, says so and what to do, nothing written" \
    $? "status $rc: $(cat "$tmp/out")"

# ---- 4. export refusals -------------------------------------------------------------------
echo "test_hf: what the layout cannot express is refused"
refuse_export() { # WHAT PATTERN SETTINGS...
    local what=$1 pat=$2 rc
    shift 2
    train "x" "$@" || { bad "$what: training the model failed: $(tail -n 3 "$tmp/x.log")"; return; }
    "$moe" export --ckpt "$tmp/x/ckpt.bin" --format hf --out "$tmp/refused" > "$tmp/out" 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "$pat" "$tmp/out" && [ ! -e "$tmp/refused" ]
    check "export of $what: exit 2, names $pat, no folder" $? "status $rc: $(cat "$tmp/out")"
    rm -rf "$tmp/x" "$tmp/refused"
}
refuse_export "sigmoid scores" "moe.score=sigmoid" --set moe.score=sigmoid
refuse_export "unnormalised gates" "moe.norm_topk=0" --set moe.norm_topk=0
refuse_export "scaled gates" "moe.route_scale" --set moe.route_scale=2
refuse_export "aux-free biases" "moe.balance=aux_free" --set moe.balance=aux_free
refuse_export "expert choice" "moe.routing=expert_choice" --set moe.routing=expert_choice \
    --set moe.balance=none
refuse_export "shared experts" "moe.num_shared" --set moe.num_shared=1
refuse_export "a dense block first" "moe.first_dense" --set moe.first_dense=1
refuse_export "a capacity at evaluation" "moe.capacity_factor" --set moe.capacity_factor=1.25
refuse_export "a bf16 router" "moe.router_precision" --set moe.router_precision=bf16
refuse_export "sandwich norms" "model.norm=sandwich" --set model.norm=sandwich --set moe.num_experts=0
refuse_export "norms on queries and keys in a dense model" "model.qk_norm=head in a dense model" \
    --set model.qk_norm=head --set moe.num_experts=0
refuse_export "Qwen3-MoE with aux-free biases" "aux_free.*Qwen3MoeForCausalLM" --set model.qk_norm=head \
    --set moe.balance=aux_free
refuse_export "OLMoE with a dense block" "moe.first_dense.*OlmoeForCausalLM" --set model.qk_norm=full \
    --set moe.first_dense=1
refuse_export "OLMoE with heads of their own width" "model.head_dim=12: OLMoE" --set model.qk_norm=full \
    --set model.head_dim=12
refuse_export "latent attention with softmax scores" "moe.score=softmax: DeepSeek-V3" "${mla[@]}"
refuse_export "latent attention without a shared expert" "moe.num_shared=0: DeepSeek-V3" "${mla[@]}" \
    --set moe.score=sigmoid
refuse_export "latent attention with MoE blocks every other block" "moe.every.*DeepseekV3ForCausalLM" \
    "${mla[@]}" --set moe.score=sigmoid --set moe.num_shared=1 --set moe.every=2
refuse_export "group-limited routing" "moe.n_group" --set moe.n_group=2 --set moe.topk_group=1
refuse_export "multi-token prediction modules" "model.mtp_depth=1" --set model.mtp_depth=1
before=$(cksum < "$tmp/hf-moe/model.safetensors")
"$moe" export --ckpt "$tmp/dense/ckpt.bin" --format hf --out "$tmp/hf-moe" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "already exists" "$tmp/out" && [ "$(cksum < "$tmp/hf-moe/model.safetensors")" = "$before" ]
check "export into a folder that holds its files: exit 2, nothing changed" $? "status $rc: $(cat "$tmp/out")"

# ---- 5. import refusals -----------------------------------------------------------------
echo "test_hf: what moe.c cannot represent is refused"
refuse_import() { # WHAT PATTERN KEY JSON-VALUE (KEY "" for none; the folder prepared by the caller)
    local what=$1 pat=$2 key=$3 value=$4 rc
    [ -d "$tmp/case" ] || cp -r "$tmp/bare-moe" "$tmp/case"
    [ -n "$key" ] && py edit "$tmp/case/config.json" "$key" "$value"
    "$moe" import --format hf --from "$tmp/case" --out "$tmp/refused.bin" > "$tmp/out" 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "$pat" "$tmp/out" && [ ! -e "$tmp/refused.bin" ]
    check "import of $what: exit 2, says \"$pat\", nothing written" $? "status $rc: $(cat "$tmp/out")"
    rm -rf "$tmp/case" "$tmp/refused.bin" # a failed check leaves no file to fail the next
}
refuse_import "a vocabulary beyond model.vocab's range" \
    '"vocab_size" is 16777217, not a whole number in \[2, 16777216\]' vocab_size 16777217
refuse_import "a vocab_size the embedding does not have" \
    "tensor 'model.embed_tokens.weight' is not shaped as config.json says" vocab_size 300
refuse_import "key-value heads that the weights do not have" \
    "tensor 'model.layers.0.self_attn.k_proj.weight' is not shaped as config.json says" \
    num_key_value_heads 2
refuse_import "more key-value heads than heads" \
    "num_key_value_heads (5) does not divide num_attention_heads (4)" num_key_value_heads 5
refuse_import "key-value heads that do not divide the heads" \
    "num_key_value_heads (3) does not divide num_attention_heads (4)" num_key_value_heads 3
refuse_import "attention biases" "attention_bias" attention_bias true
refuse_import "MLP biases" "mlp_bias" mlp_bias true
refuse_import "another activation" "hidden_act is not silu" hidden_act '"gelu"'
refuse_import "another norm epsilon" "rms_norm_eps" rms_norm_eps 1e-6
refuse_import "rotary scaling" "rope_scaling" rope_scaling '{"type": "linear", "factor": 2.0}'
refuse_import "a short sliding window" "sliding_window (8) is below max_position_embeddings (32)" \
    sliding_window 8
cp -r "$tmp/v5" "$tmp/case"
refuse_import "no rotary base at all" "states no rope_theta" rope_parameters null
cp -r "$tmp/v5" "$tmp/case"
refuse_import "a rotary type other than default" "rope_type is not default" rope_parameters \
    '{"rope_theta": 10000.0, "rope_type": "yarn"}'
refuse_import "another model type" "model_type \"qwen2\"" model_type '"qwen2"'
cp -r "$tmp/hf-deepseek-aux" "$tmp/case"
py fill "$tmp/case/model.safetensors" model.layers.1.mlp.gate.e_score_correction_bias 0.5
refuse_import "correction biases where moe_c_config routes without" "e_score_correction_bias' is not zero" "" ""
cp -r "$tmp/bare-qwen3" "$tmp/case"
py edit "$tmp/case/config.json" num_local_experts 4
refuse_import "two numbers of experts that disagree" '"num_experts" (8) and "num_local_experts" (4)' "" ""
cp -r "$tmp/bare-qwen3" "$tmp/case"
refuse_import "no number of experts" 'has no "num_experts" (nor "num_local_experts")' num_experts null
cp -r "$tmp/bare-deepseek" "$tmp/case"
py add "$tmp/case/model.safetensors" model.layers.3.eh_proj.weight
refuse_import "DeepSeek-V3's multi-token prediction layer" "multi-token prediction layer (model.layers.3" "" ""
cp -r "$tmp/bare-deepseek" "$tmp/case"
refuse_import "DeepSeek-V3 without q_lora_rank" 'has no "q_lora_rank"' q_lora_rank null
cp -r "$tmp/bare-deepseek" "$tmp/case"
refuse_import "DeepSeek-V3 without shared experts" '"n_shared_experts" is 0' n_shared_experts 0
cp -r "$tmp/bare-deepseek" "$tmp/case"
py drop "$tmp/case/model.safetensors" model.layers.2.mlp.gate.e_score_correction_bias
refuse_import "DeepSeek-V3 without a correction bias" "no tensor 'model.layers.2.mlp.gate.e_score_correction_bias'" "" ""
cp -r "$tmp/bare-olmoe" "$tmp/case"
refuse_import "OLMoE's clipping of q, k, v" "clip_qkv clips" clip_qkv 8
cp -r "$tmp/bare-olmoe" "$tmp/case"
refuse_import "OLMoE with a head_dim of its own" "head_dim (12) is not hidden_size / num_attention_heads" head_dim 12
cp -r "$tmp/bare-qwen3" "$tmp/case"
refuse_import "Qwen3-MoE with a dense last block" "mlp_only_layers and decoder_sparse_step place" \
    mlp_only_layers '[2]'
cp -r "$tmp/bare-qwen3" "$tmp/case"
refuse_import "Qwen3-MoE's mlp_only_layers of strings" "mlp_only_layers holds a string" mlp_only_layers '["0"]'
cp -r "$tmp/bare-qwen3" "$tmp/case"
py edit "$tmp/case/config.json" sliding_window 8
refuse_import "Qwen3-MoE with a short sliding window in use" "sliding_window (8) is below" use_sliding_window true
refuse_import "an odd head_dim" "head_dim (7) is odd" head_dim 7
refuse_import "tie_word_embeddings in quotes" '"tie_word_embeddings" is a string; it must be true or false' \
    tie_word_embeddings '"true"'
refuse_import "a missing size" "has no \"hidden_size\"" hidden_size null
refuse_import "a layer more than the weights" "has no tensor 'model.layers.2" num_hidden_layers 3
refuse_import "a layer less than the weights" "has a tensor 'model.layers.1" num_hidden_layers 1
cp -r "$tmp/hf-moe" "$tmp/case"
refuse_import "moe_c_config against config.json" "disagree" max_position_embeddings 64
cp -r "$tmp/hf-moe-tied" "$tmp/case"
refuse_import "a tied moe_c_config against tie_word_embeddings false" "disagree" \
    tie_word_embeddings false
cp -r "$tmp/hf-moe" "$tmp/case"
refuse_import "a moe_c_config that is a number" '"moe_c_config" is a number; it must be a string' \
    moe_c_config 42
cp -r "$tmp/hf-moe" "$tmp/case"
refuse_import "a moe_c_config that is an array" '"moe_c_config" is an array; it must be a string' \
    moe_c_config '["model.d_model = 32"]'
cp -r "$tmp/bare-moe" "$tmp/case"
py add "$tmp/case/model.safetensors" model.layers.0.self_attn.q_proj.bias
refuse_import "an extra tensor (a bias)" "q_proj.bias" "" ""
cp -r "$tmp/bare-moe" "$tmp/case"
mv "$tmp/case/model.safetensors" "$tmp/case/model-00001-of-00002.safetensors"
echo '{}' > "$tmp/case/model.safetensors.index.json"
refuse_import "a sharded model" "split over several safetensors files" "" ""
cp -r "$tmp/bare-moe" "$tmp/case"
rm "$tmp/case/model.safetensors"
refuse_import "no model.safetensors" "has no model.safetensors" "" ""
cp -r "$tmp/bare-moe" "$tmp/case"
printf '{"model_type": "mixtral",, }' > "$tmp/case/config.json"
refuse_import "a config.json that is not JSON" "is not valid JSON" "" ""
mkdir -p "$tmp/case"
cp "$tmp/hf-moe/config.json" "$tmp/case/x"
"$moe" import --format hf --from "$tmp/case/x" --out "$tmp/refused.bin" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "is not a folder" "$tmp/out" && [ ! -e "$tmp/refused.bin" ]
check "import --format hf of a file: exit 2, says it is not a folder" $? "status $rc: $(cat "$tmp/out")"
"$moe" import --format onnx --from "$tmp/hf-moe" --out "$tmp/refused.bin" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "safetensors (moe.c's names) or hf" "$tmp/out"
check "--format onnx: exit 2, the formats named" $? "status $rc: $(head -n 2 "$tmp/out")"

# ---- 6. eval --logits ---------------------------------------------------------------------
echo "test_hf: eval --logits"
"$moe" eval --ckpt "$tmp/moe/ckpt.bin" --batches 1 --logits "$tmp/l.st" > "$tmp/out" 2>&1
rc=$?
loss=$(sed -n 's/^val_loss \([0-9.]*\).*/\1/p' "$tmp/out")
got=$(python3 - "$tmp/l.st" << 'PY'
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
print(h["logits"]["shape"], h["tokens"]["shape"], h["__metadata__"]["loss"])
PY
)
[ $rc -eq 0 ] && [ -n "$loss" ] && grep -q '^\[4, 32, 256\] \[4, 32\] ' <<< "$got" &&
    float_cmp "(${got##* } - $loss)^2" "<" "1e-12"
check "eval --logits: (4, 32, 256) logits, (4, 32) tokens, the batch's loss $loss" $? \
    "status $rc: $got $(cat "$tmp/out")"
"$moe" eval --ckpt "$tmp/moe/ckpt.bin" --batches 1 --logits "$tmp/l.st" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "already exists" "$tmp/out"
check "eval --logits of an existing file: exit 2" $? "status $rc: $(cat "$tmp/out")"
finish

# symptoms.sh: the series each gallery figure plots, computed from a run directory's CSV files
# (sourced by gallery.sh). `symptom METRIC DIR` prints "step value" lines; `symptom_label
# METRIC` the y axis's label.
#
#   loss     train.csv's training loss
#   tok      train.csv's tokens per second
#   grad     train.csv's gradient norm (before clipping)
#   gap      validation loss minus the mean training loss of the 10 steps up to it
#   aux      the balance term aux_coef x MoE blocks x aux_loss over the language-model loss
#   share    router.csv: the assignments' share of the busiest quarter of the experts (at least
#            top_k of them), the largest over the layers
#   minload  router.csv: the least-loaded expert's share over its fair share 1/E, the least
#            over the layers
#   drop     router.csv: the dropped fraction, mean over the layers
#   logit    router.csv: the largest |router logit|, the largest over the layers
#   churn    router.csv: the share of the load that changed expert since the step before, mean
#            over the layers
#   bias     router.csv: the range (max - min) of the aux-free biases, the largest over the layers
#   ep       dist.csv: the busiest process's share of the rows its experts computed, over 1 /
#            processes (1: even), the largest over the layers

cfg() { awk -F' = ' -v k="$2" '$1 == k { print $2 }' "$1/config.txt"; }

symptom_label() {
  case $1 in
    loss) echo "training loss (nats)" ;;
    tok) echo "tokens per second" ;;
    grad) echo "gradient norm before clipping" ;;
    gap) echo "validation - training loss (nats)" ;;
    aux) echo "balance term / LM loss" ;;
    share) echo "share of the busiest quarter of experts" ;;
    minload) echo "least-loaded expert / fair share" ;;
    drop) echo "dropped fraction" ;;
    logit) echo "max |router logit|" ;;
    churn) echo "load that changed expert" ;;
    ep) echo "rows of the busiest process / fair share" ;;
    bias) echo "range of the aux-free biases" ;;
  esac
}

symptom() {
  local m=$1 d=$2
  case $m in
    loss) awk -F, 'NR > 1 && $2 != "" { print $1, $2 }' "$d/train.csv" ;;
    tok) awk -F, 'NR > 1 && $7 != "" { print $1, $7 }' "$d/train.csv" ;;
    grad) awk -F, 'NR > 1 && $6 != "" { print $1, $6 }' "$d/train.csv" ;;
    gap) awk -F, 'NR > 1 { t[NR] = $2; s = 0; n = 0
                           for (i = NR; i > NR - 10 && i > 1; i--) { s += t[i]; n++ }
                           if ($8 != "") print $1, $8 - s / n }' "$d/train.csv" ;;
    aux)
      local coef n_moe
      coef=$(cfg "$d" moe.aux_coef)
      n_moe=$(awk -F, 'NR > 1 && $1 == 1' "$d/router.csv" | wc -l)
      awk -F, -v c="$coef" -v n="$n_moe" 'NR > 1 && $2 > 0 { print $1, c * n * $3 / $2 }' "$d/train.csv" ;;
    share | minload | drop | logit | churn | bias)
      local E K
      E=$(cfg "$d" moe.num_experts)
      K=$(cfg "$d" moe.top_k)
      awk -F, -v m="$m" -v E="$E" -v K="$K" '
        NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        function flush() { if (step != "") print step, (m == "drop" || m == "churn") ? acc / nl : acc }
        $1 != step { flush(); step = $1; acc = (m == "minload") ? 1e9 : 0; nl = 0 }
        {
          nl++
          if (m == "drop") acc += $col["drop_frac"]
          else if (m == "logit") { if ($col["max_logit"] > acc) acc = $col["max_logit"] }
          else if (m == "bias") {
            lo = $col["bias_0"]; hi = lo
            for (e = 1; e < E; e++) { v = $col["bias_" e]; if (v < lo) lo = v; if (v > hi) hi = v }
            if (hi - lo > acc) acc = hi - lo
          }
          else if (m == "minload") {
            for (e = 0; e < E; e++) if ($col["load_" e] * E < acc) acc = $col["load_" e] * E
          } else if (m == "churn") {
            moved = 0
            for (e = 0; e < E; e++) {
              v = $col["load_" e]; k = $2 SUBSEP e
              if (k in prev) moved += (v > prev[k] ? v - prev[k] : prev[k] - v)
              prev[k] = v
            }
            acc += moved / 2
          } else { # share: the busiest quarter (at least K experts)
            q = int((E + 3) / 4); if (q < K) q = K
            for (e = 0; e < E; e++) l[e] = $col["load_" e]
            s = 0
            for (i = 0; i < q; i++) { b = -1
              for (e = 0; e < E; e++) if (!(e in used) && (b < 0 || l[e] > l[b])) b = e
              used[b] = 1; s += l[b] }
            delete used
            if (s > acc) acc = s
          }
        }
        END { flush() }' "$d/router.csv" ;;
    ep)
      [ -f "$d/dist.csv" ] || return 0
      awk -F, 'NR > 1 && $2 >= 0 { r[$1 SUBSEP $2 SUBSEP $3] = $8; steps[$1] = 1; layers[$2] = 1
                                    if ($3 + 1 > W) W = $3 + 1 }
               END { for (s in steps) { best = 0
                       for (l in layers) { t = 0; top = 0
                         for (k = 0; k < W; k++) { v = r[s SUBSEP l SUBSEP k]; t += v; if (v > top) top = v }
                         if (t > 0 && top * W / t > best) best = top * W / t }
                       print s, best } }' "$d/dist.csv" | sort -n ;;
  esac
}

# What replay should count, worked out from a routes file alone (tests/cli/replay.sh):
# per MoE layer, the records each step reads (the union of its rows' experts) and, for a
# pool of `slots` records shared by every layer (the engine's cache with prediction off,
# --cache-policy lru), how many of them are found in memory: a read takes a free slot,
# else the least recently used record not asked for by its step: the reading layer's own
# once it holds its share (slots / layers), else one of a layer holding more than its
# share, else any.
#   zcat FILE | awk -v mode=decode -v B=2 -v slots=N -f expect.awk     (decode steps)
#   zcat FILE | awk -v mode=prefill -v P=8 -f expect.awk               (prompt passes)
# Prints "layer union hits" per MoE layer (0-based among MoE layers), then "pool N" the
# distinct records seen (to tell whether the pool ever had to evict).
/^# top_k / { K = $3 }
/^# layers / { L = $3 }
/^#/ { next }
{
  r = $1
  if (!(r in len)) { order[nreq++] = r }
  len[r]++
  line[r, $2] = $0
}
function step_layer(n, rows_req, rows_pos, m,    i, j, f, e, seen, ids, k, key) {
  k = 0
  for (i = 0; i < n; i++) {
    split(line[rows_req[i], rows_pos[i]], f, " ")
    for (j = 0; j < K; j++) {
      e = f[4 + m * K + j] + 0
      if (!(e in seen)) { seen[e] = 1; ids[k++] = e }
    }
  }
  union[m] += k
  asort_num(ids, k)
  if (!slots) return
  step_start = clock
  for (i = 0; i < k; i++) {          # hits first, in ascending order, as begin() pins them
    key = m SUBSEP ids[i]
    if (key in stamp) { hits[m]++; stamp[key] = ++clock; hit[i] = 1 } else hit[i] = 0
  }
  for (i = 0; i < k; i++) {          # then the reads, each taking a slot
    if (hit[i]) continue
    key = m SUBSEP ids[i]
    if (used == slots) evict(m)
    else used++
    stamp[key] = ++clock
    layer_of[key] = m
    held[m]++
    if (!(key in ever)) { ever[key] = 1; distinct++ }
  }
}
function share_rank(l, m,    share) { # 0 gives way first
  share = int(slots / L)
  return l == m && held[l] >= share ? 0 : held[l] > share ? 1 : 2
}
function evict(m,    key, best, bk, r, best_r) {
  best = -1
  for (key in stamp) {
    if (stamp[key] > step_start) continue
    r = share_rank(layer_of[key], m)
    if (best < 0 || r < best_r || (r == best_r && stamp[key] < best)) {
      best = stamp[key]; bk = key; best_r = r
    }
  }
  if (best < 0) { print "every slot holds this step's records: give the test more RAM" > "/dev/stderr"; exit 1 }
  held[layer_of[bk]]--
  delete stamp[bk]
}
function asort_num(a, n,    i, j, t) {
  for (i = 1; i < n; i++) for (j = i; j > 0 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
}
function run_step(n, rq, ps,    m) { for (m = 0; m < L; m++) step_layer(n, rq, ps, m) }
END {
  if (mode == "prefill") {
    for (q = 0; q < nreq; q++) {
      r = order[q]
      for (p0 = 0; p0 < len[r]; p0 += P) {
        n = 0
        for (p = p0; p < p0 + P && p < len[r]; p++) { rq[n] = r; ps[n] = p; n++ }
        run_step(n, rq, ps)
      }
    }
  } else {
    next_q = 0
    for (i = 0; i < B; i++) preq[i] = -1
    for (;;) {
      busy = 0
      for (i = 0; i < B; i++) {
        if (preq[i] >= 0 && pnext[i] >= len[preq[i]]) preq[i] = -1
        if (preq[i] < 0 && next_q < nreq) { preq[i] = order[next_q++]; pnext[i] = 0 }
        if (preq[i] >= 0) busy = 1
      }
      if (!busy) break
      n = 0
      for (i = 0; i < B; i++)
        if (preq[i] >= 0 && pnext[i] < len[preq[i]]) { rq[n] = preq[i]; ps[n] = pnext[i]++; n++ }
      run_step(n, rq, ps)
    }
  }
  for (m = 0; m < L; m++) printf "%d %d %d\n", m, union[m], hits[m] + 0
  printf "pool %d\n", distinct
}

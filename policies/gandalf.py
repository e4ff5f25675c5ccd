"""`gandalf`: SSD-lifetime-aware placement ("Gandalf: Flash Shall Not Die!", §3 and §5).

**The paper's rule.** DRAM-first: every new object goes to DRAM. When DRAM must free space the
policy prices the cheapest *drop* and the cheapest *move* (write to SSD) in the same units —
dollars per byte freed per unit of idle time — and does the cheaper one:

- drop: D = P(idle ≥ w)·n·c / (s·w) — the value of the object's *next* hit (n tokens it would
  save at c dollars each, weighted by the probability P that an object idle for w is reused),
  per byte s freed and per second w it has been idle. Only DRAM *leaves* are dropped: a
  segment with no child resident in any tier and no resident state (a state is always a leaf).
- move: M = (γ·μ(t)·p_w·s + V) / (s·w) — the write fee (p_w = SSD wear price per byte, γ its
  weight, μ(t) the write-budget multiplier) plus V, the next-hit value P·n·c of the SSD
  victims the write displaces, divided by s·w the same way. Only root-side DRAM nodes are moved
  (a segment whose parent is the root or holds an SSD copy; a state whose segment is not
  DRAM-only), so along every path the SSD part stays a prefix of the DRAM part.
- the move door: per kind × size class, the longest-lived (least recently used) root-side DRAM
  candidate, up to `move_candidates` of them (the paper's §5.6 ablation goes up to 64); a
  candidate may be moved only if its own next-hit value P·n·c exceeds its own fee
  γ·μ·p_w·s + V (equivalently D > M for that object). Among the open candidates the cheapest M
  is compared with the cheapest droppable D.
- the leaf's own move: when that comparison would drop a leaf whose next-hit value exceeds the
  fee of writing its DRAM-only run (the leaf and its DRAM-only ancestors, which the prefix rule
  makes a move write, root-side end first), the run is moved instead: the paper weighs drop
  against move for the object being evicted (there s and w cancel). Without it (issue #11) only
  root-side nodes were priced; where the root side is a hot shared prefix (w at `min_idle_s`)
  M = γ·p_w/w never beat a cold leaf's D, so nothing was written at any γ ≥ 1: on the demo
  multi-round (100 sessions × 10 turns, Kimi-K3, DRAM 32 GB / SSD 256 GB) the shared 1,024-token
  block had P ≈ 0.7, door open (value 6.6e-5 $ vs fee 1.4e-6 $) but M = 5e-14 $/B/s against the
  cold states' D = 1e-15..2e-14 $/B/s (449 MB states idle 15–80 s), at every decision.
- μ(t) keeps SSD writes on the budget TBW·t/T_target (`_estimators.WriteBudget`).

A DRAM copy of an object that is also on SSD ("clean") costs nothing to evict and goes first.
SSD victims are the lowest-D SSD objects (the same price, so V is what the paper displaces).

**Departures from the paper's text** (issue #29 lists them; each stays, for the reason given):
- **Idle time w in seconds, not requests.** w is the time since the object last served a request,
  floored at `min_idle_s` (1 s); the paper counts requests since. Not the cause of the γ collapse:
  on the `policies-gandalf-wip` branch, where the clock is a parameter (`idle_clock`), Weka ×
  Qwen3.5-27B at DRAM / SSD 1 % / 10 % of the footprint, γ = 0…64 in 13 points, the worst rise
  of a smaller γ's miss ratio over a larger one's is 0.092 counting requests and 0.079 in
  seconds; single points move by up to 0.05 (γ = 0: 0.227 vs 0.191). Seconds stays.
- **The move door per kind × reuse class × size class** (the estimator's lists), where the paper
  says kind × size class. Same branch, same case: kind × size class gives 0.057 (vs 0.092), and
  over 24 small generated cases (test_gandalf_gamma there) 7 fail the 0.01 tolerance either way.
- **SSD victims without a leaf check**: the lowest-D SSD list head is evicted even when resident
  descendants are reachable only through it (they are stranded until a request recomputes it).
  Restricting victims to objects whose eviction strands nothing (per list, the first of its
  `scan` oldest entries that keeps a DRAM copy, is a state, or is a segment with nothing
  resident below; the head when no list has one) was measured on this rule and not taken: on
  the five cases of the next paragraph that break the tolerance or come near it (Weka × Kimi-K3
  3 % / 30 %, agentic × Qwen3.5-27B 1 % / 10 %, multi-round × Qwen3.5-27B 1 % / 10 %, Weka ×
  Kimi-K3 1 % / 10 %, Weka × Qwen3.5-27B 3 % / 30 %) the worst rise goes from 0.016, 0.048,
  0.040, 0.009, 0.007 to 0.002, 0.007, 0.000, 0.061, 0.014: Weka × Kimi-K3 at 1 % / 10 % breaks
  (γ = 0 misses 0.184 instead of 0.118). Pricing V over the same leaf-only victims is worse
  still: 0.002, 0.114, 0.000, 0.145, 0.164, and Weka × Qwen3.5-27B 1 % / 10 % goes from 0.001
  to 0.082 (γ = 0 misses 0.540 instead of 0.166). Evicting, with an SSD victim, the SSD-only
  descendants it strands (`evict_with`) comes closest: on those five cases and Weka ×
  Qwen3.5-27B 1 % / 10 % the worst rise goes from 0.016, 0.048, 0.040, 0.009, 0.007, 0.001 to
  0.005, 0.003, 0.005, 0.014, 0.002, 0.014 — within the tolerance in four of six, and γ = 0 on
  Weka × Qwen3.5-27B 1 % / 10 % misses 0.192 instead of 0.166; pricing the victim by its whole
  stranded subtree (value and bytes) undoes most of it (0.003, 0.025, 0.023, 0.012, 0.006,
  0.053). Neither is taken: no variant measured is within 0.01 everywhere.

**Where the γ trade-off holds and where it breaks** (issue #29; γ = 0, 1, 2, 3, 4, 6, 8, 12, 16,
24, 32, 48, 64; the worst rise of a smaller γ's miss ratio over a larger γ's; the must-show
asks ≤ 0.01). With an SSD larger than the footprint (100 TB: nothing is ever evicted from it)
the DRAM decision alone is monotone within the tolerance on every workload measured: Weka (the
six shared traces together) 0.002 / 0.002 (Kimi-K3 / Qwen3.5-27B), agentic (8 sessions, seed
21) 0.000 / 0.000, multi-round (40 × 8, seed 22) 0.000 / 0.009, trace-a (400 sessions, seed 23)
0.000 / 0.004. With a bounded SSD it breaks in 3 of 16 cases: DRAM / SSD 1 % / 10 %: 0.009 /
0.001, 0.006 / 0.048, 0.000 / 0.040, 0.000 / 0.005; 3 % / 30 %: 0.016 / 0.007, 0.000 / 0.000,
0.000 / 0.000, 0.002 / 0.000. So the cause lies in the SSD's side — what a write displaces and
what the SSD's eviction leaves reachable — not in the drop/move price. V is part of it, not
all: with V ≡ 0 (not the paper's rule) those five cases give 0.016, 0.016, 0.019, 0.017, 0.007.
SSD bytes fall with γ but not strictly: rises of up to 6 % between γ points (agentic ×
Qwen3.5-27B 1 % / 10 %: 81.2 GiB at γ = 4, 86.2 at γ = 8).

**The mechanism: SSD evictions strand what hangs below them** (issue #29, measured on the three
breaking cases by counting, per run, SSD writes, SSD evictions and what each eviction leaves
unreachable). An SSD victim is the cheapest list head by its own D; nothing asks whether it is a
leaf. A segment evicted from the SSD with no DRAM copy leaves a *prefix gap*: every resident
object below it (its state, its children's KV and states, on either tier) can serve no hit,
since a hit is a resident prefix from the root, yet each keeps its price P·n·c and its SSD
space. At small γ the door admits more writes, the SSD evicts more, and most of those evictions
are interior: Weka × Kimi-K3 3 % / 30 %, γ = 0 against γ = 2 (miss 0.093 against 0.083): 305
state writes (127.6 GiB) against 56 (23.4 GiB), 438 SSD evictions against 18, of which 261 of
274 segment evictions interior, leaving 966 GiB of SSD-resident descendants stranded (summed
over the evictions) against 38 GiB, and 137 victims already stranded when evicted against 3;
multi-round × Qwen3.5-27B 1 % / 10 %, γ = 1 against γ = 2 (0.510 against 0.484): 425 interior
evictions against 182, 65.9 GiB stranded against 28.0, 487 victims never read against 346.
Requests almost never come back through a gap to what it stranded (tokens resident beyond a
gap on a request's path: ≤ 0.5 % of the tokens in every run measured), so stranded copies are
dead weight that the next writes must displace, and the V of those writes prices the live
victims as if the dead ones were worth something. With an SSD larger than the footprint nothing
is evicted, no gap forms, and the sweep is monotone (above).
**`stranded="zero"`** follows this: an object below a gap is worth 0 (its next access cannot
be a hit) and stranded SSD objects are the SSD's first victims, their bytes free for V; a
request recreating the gap makes them reachable again. It removes two of the three breaks and
takes the third to the tolerance's edge (13-point grid: 0.005, 0.001, 0.0103 from 0.016, 0.068,
0.026) and lowers γ = 0's miss ratio there (0.089,
0.104, 0.436 from 0.093, 0.116, 0.498), but it is not monotone everywhere either and it costs
misses elsewhere. Cases rising by more than 0.01 (docs/results/2026-12-03-frontier.md,
`bench/gandalf_gamma.py`), priced then zero: of the 18 bench cases (3 traces × 2 models × 3
tiers) 3 and 2 (zero: Weka × Kimi-K3 1 % / 10 % 0.015, multi-round × Qwen3.5-27B 1 % / 10 %
0.0103); of 42 generated held-out cases (agentic seeds 31, 41; multi-round 32, 42; trace-a 33,
43; api 34, 5,000 requests) 2 and 1; of the six Weka traces one by one (36 cases) 13 and 10; of
Mooncake's first 3,000 requests (6 cases) 1 and 1 (the generated and Mooncake rows of zero were
measured with a first bookkeeping of the stranded set that the test below corrected; it moved
the 18 cases from 3 to 2 and the single Weka traces from 13 to 10). Under zero Weka ×
Qwen3.5-27B 1 % / 10 % is monotone but higher: γ = 0 misses 0.184 instead of 0.166 (LRU 0.169),
γ = 16 0.502 instead of 0.317. The single Weka traces are 3–172 requests, one session each, and
at 1 % their DRAM (0.02–0.94 GiB) is smaller than one Kimi-K3 state in four of six: there the
sweep is a cascade of a few decisions (rises up to 0.47 under both readings). The per-object
price (`stranded="priced"`, the paper's: it prices each object by its own next hit and has no
notion of reachability) stays the default; no reading measured holds everywhere. Zero breaks
fewer cases wherever measured; making it the default changes every Gandalf point of
docs/results/2026-12-03-frontier.md, which is to be measured again first.
Also measured and not taken: stranded objects worth 0 but not evicted first (4 of the 18
break), worth 0 only while on the SSD alone (2 of the 6 cases nearest the tolerance), and SSD
victims restricted to leaves, the first of each list's `scan` oldest that strands nothing (4 and
5 of the 18 break, with zero and priced; Weka × Kimi-K3 1 % / 10 % γ = 0 misses 0.140 and 0.184).

**kvwear's reading of what the paper leaves implicit** (each a parameter where it is a choice):
- **Objects below a prefix gap** (`stranded`): "priced" (default) prices them as any other;
  "zero" values them at 0 and evicts them from the SSD first (the mechanism above, with its
  numbers). Under "zero" the policy keeps the set of stranded objects (a walk below a segment
  when it leaves every tier, and when it is resident again; a new object below a gap is
  stranded at once), checked against a tree walk by tests/policies/test_gandalf_stranded.py.
- **No horizon.** D and M are both divided by s·w of their own object, so γ means the paper's
  γ: at P = 1 a full-attention block is worth moving iff n·c > γ·μ·p_w·s. (An earlier kvwear
  rule multiplied D by a horizon T — the SSD's eviction age, up to 3,600 s — which valued an
  object at thousands of next hits; it is gone: it did not reproduce any paper figure and it
  filled the SSD with superseded states.)
- **P(idle ≥ w)** (`idle_model`): "hist" (default) = the probability that an object of its class
  idle for w is reused, from `_estimators.ReuseHistogram`: decayed counts (time constant
  `window_s`) of accesses into the class, of reuses, and of reuse gaps in log₂ bins; P =
  G(≥w)/(G(≥w) + never-reused). "exp" = q·e^(−λw), λ an exponential fit of the class's gaps over
  the last `window_s`, q the class's reuse fraction. Classes: kind × reuse class (served once /
  more) × log₂ of the prefix length at the object's end (in 256-token units). w is the time since
  the object last *served* a request (floored at `min_idle_s`).
- **Reuse is credited only to what served the request** (`ctx.hit_state`, `ctx.hit_blocks`):
  the segments inside the hit and the state it ends at. Resident objects the request passes
  without being served by them (a state shallower than the one that served, blocks beyond the
  hit) keep their counts; they only get their recency refreshed, since the request keeps them on
  a live path. Reuses of dropped objects are counted through a bounded ghost table (`ghosts`):
  at most one dropped state per request — the deepest one on its path and deeper than the hit
  (keeping it, with its KV, would have served the request; requiring its KV to be resident too
  made a dropped state's KV worthless, then never credited, and Gandalf stopped writing) — and a
  dropped segment recreated inside the hit or the credited state's prefix.
- **Where a dropped state is found** (`ghost_credit`): "ends" (default) looks at the end of each
  segment the request passes; "inside" at every block position in it. They differ when a tip's
  KV was dropped with it: the next turn recreates the path as one segment through the old
  checkpoint position, so "ends" never credits that reuse (on the hand-built sessions of
  tests/policies, P of the tips falls below 0.1 and nothing is written at γ = 4). "inside" is the
  more faithful count, but it is not the default on the evidence (bench/frontier.py tiers, γ = 0,
  1, 2, 4, 8, 16, 32, 64; "ends" in brackets): Weka × Kimi-K3 becomes nearly monotone, miss 0.122,
  0.118, 0.119, 0.118, 0.121, 0.124, 0.137, 0.826 at 179.2, 128.8, 123.8, 121.8, 115.6, 97.1, 88.7,
  4.0 GiB (0.115, 0.118, 0.125, 0.122, 0.126, 0.117, 0.180, 0.821 at 181.6, 126.9, 125.1, 121.8,
  105.7, 91.1, 57.8, 5.3), but in every other case most of its points are dominated by the
  default's (7 of 8 on Weka × Qwen3.5-27B, 6 and 7 of 8 on Mooncake × Kimi-K3 and Qwen3.5-27B;
  where it misses less it writes 1.3–2.2× the bytes): Weka × Qwen3.5-27B γ = 0, 4, 16 miss 0.189,
  0.216, 0.261 at 326.1, 265.7, 197.4 GiB (0.166, 0.178, 0.317 at 321.1, 284.8, 148.4; γ = 0 no
  longer at LRU's 0.169); Mooncake's first 3,000 requests, Kimi-K3, γ = 0, 4, 8, 16: 0.844,
  0.842, 0.862, 0.940 at 1,890.4, 1,347.5, 579.3, 99.1 GiB (0.833, 0.834, 0.879, 0.960 at 1,878.6,
  732.8, 265.7, 0), Qwen3.5-27B γ = 0, 4, 8: 0.889, 0.879, 0.934 at 2,401.2, 1,167.2, 198.1 GiB
  (0.880, 0.872, 0.908 at 2,388.5, 998.3, 278.9). Why a truer P costs misses there is not
  explained yet (issue #11).
- **Hybrid structure**: a segment that leads to no resident state (no resident state at its end,
  no resident child) can be in no hit, so its value is 0 (it goes first; a request that later
  checkpoints below it recomputes it anyway). A *superseded* state — its segment already has a
  child, i.e. a later request extended that prefix and checkpointed deeper — is worth
  P × `superseded_weight` (default 0, the paper's reading: a linear state is reused once, by the
  next turn, and the next turn will use the deeper state).
- **n for a state** (`state_tokens`): "marginal" (default) = the tokens from the deepest resident
  state above it on its path to its own end — what the next hit loses without it, since the hit
  falls back to that state; "segment" = its own tokens, since the previous checkpoint position on
  its path, resident or dropped (measured when the state is created, less once a request
  checkpoints between) — the per-object greedy reading of "n = the object's tokens"; "prefix" =
  its whole prefix (as if nothing above it could serve). "marginal" stays the default on the
  paper's text and on the evidence. The paper's D is the recompute cost the drop causes at the
  next hit, and in a hybrid model that is the marginal loss: with no state above resident, a
  dropped tip costs its next turn the whole prefix, not its last segment, and the KV below it is
  useless without it (so under "segment" the KV of a short tip is not moved either: the state is
  dropped first, then its KV leads nowhere). And "segment" loses almost everywhere (bench/frontier.py
  tiers, γ = 0, 1, 2, 4, 8, 16, 32, 64; marginal, then prefix, in brackets): Weka × Kimi-K3 miss
  0.125, 0.151, 0.167, 0.189, 0.345, 0.331, 0.571, 0.841 at 211.2, 103.3, 96.8, 83.3, 63.2, 52.0,
  26.6, 0.4 GiB, linear share 0.63, 0.31, 0.29, 0.25, 0.21, 0.13, 0.08, 1.00 (marginal: 0.115,
  0.118, 0.125, 0.122, 0.126, 0.117, 0.180, 0.821 at 181.6, 126.9, 125.1, 121.8, 105.7, 91.1,
  57.8, 5.3 GiB, share 0.54, 0.38, 0.35, 0.32, 0.29, 0.23, 0.13, 0.71; prefix: 0.123, 0.128, 0.128,
  0.128, 0.128, 0.123, 0.126, 0.821 at 186.3, 140.1, 140.5, 156.6, 155.2, 119.8, 104.5, 14.0 GiB,
  share 0.57, 0.38, 0.38, 0.46, 0.46, 0.35, 0.30, 0.75) — fewer bytes and a lower linear share
  (still 0.25 at γ = 4) bought with 0.03–0.39 more misses at γ = 1…32; Weka × Qwen3.5-27B γ = 0…16 0.175,
  0.179, 0.214, 0.226, 0.272, 0.386 at 300.5, 289.0, 278.4, 269.9, 247.2, 131.5 GiB (marginal 0.166,
  0.171, 0.174, 0.178, 0.212, 0.317 at 321.1, 299.1, 297.0, 284.8, 200.0, 148.4; prefix 0.176, 0.177,
  0.190, 0.187, 0.219, 0.305 at 316.2, 303.4, 302.4, 284.2, 224.5, 174.6); Mooncake's first 3,000
  requests γ = 0…8, Kimi-K3 0.834, 0.845, 0.845, 0.848, 0.914 at 1,878.5, 1,432.2, 1,050.3, 664.5,
  210.6 GiB (marginal 0.833, 0.830, 0.829, 0.834, 0.879 at 1,878.6, 1,641.6, 1,205.7, 732.8, 265.7;
  prefix 0.834, 0.833, 0.832, 0.831, 0.879 at 1,874.2, 1,752.5, 1,358.5, 803.9, 323.8), Qwen3.5-27B
  0.883, 0.876, 0.875, 0.907, 0.956 at 2,405.0, 2,153.6, 1,819.5, 783.7, 224.6 GiB (marginal 0.880,
  0.876, 0.879, 0.872, 0.908 at 2,388.5, 2,297.9, 2,015.9, 998.3, 278.9); γ ≥ 16 writes nothing on
  Mooncake under every reading.
- **`superseded_weight` stays 0, the paper's value, on this evidence** (same tiers, marginal n;
  γ = 0, 4, 16, 32): on Weka × Kimi-K3 0.1 gives 256.4, 113.8, 88.5, 60.0 GiB at miss 0.108,
  0.101, 0.110, 0.178 and 1 gives 272.8, 132.9, 95.8, 53.3 GiB at 0.119, 0.110, 0.116, 0.284,
  against 0's 181.6, 121.8, 91.1, 57.8 GiB at 0.115, 0.122, 0.117, 0.180; on Qwen3.5-27B (γ = 0,
  4, 16) 0.1 gives 351.6, 260.6, 144.9 GiB at 0.167, 0.163, 0.309 and 1 gives 327.6, 276.4, 101.6
  GiB at 0.175, 0.169, 0.391, against 0's 321.1, 284.8, 148.4 GiB at 0.166, 0.178, 0.317; on
  Mooncake (first 3,000 requests, Kimi-K3, γ = 0, 4) the three are within 0.4 %. So 0.1
  dominates 0 at γ = 4 and 16 on Weka (0.7–2.1 points of miss ratio, 2–9 % of the bytes) but
  writes 10–41 % more at γ = 0, and 1 misses far more at Kimi-K3's γ = 32 and Qwen3.5-27B's
  γ = 16; no weight wins at every γ, so the paper's 0 stays. The gain of 0.1 is not superseded
  states serving hits: on Weka × Kimi-K3 at γ = 4 no request's hit ended at a state that was
  superseded when the request arrived (0 of 411–416 state hits, at each weight), so it comes
  from the order of the other decisions (a superseded state no longer pre-empts every DRAM
  decision at D = 0, and displacing one from the SSD adds to V).
- **Why Gandalf still writes states on Weka × Kimi-K3 at γ ≥ 4** (issue #11 asks ≤ 10 % of the SSD
  bytes; measured 0.32, 0.29, 0.23, 0.13 at γ = 4, 8, 16, 32): not superseded states — none is
  written at γ > 0 (tests/policies: `test_gandalf_never_moves_a_superseded_state`) — and not the
  leaf's own move: each of the 94 states written at γ = 4 went through the root-side door as a
  session's live tip (no child yet, its KV already on SSD, idle 1–8,092 s), its next-hit value
  1.04–85× its fee. DRAM is 1 % of the footprint, six Kimi-K3 states (449 MB each), fewer than the
  sessions in flight, so a tip cannot wait in DRAM for its next turn; at P ≈ 0.7 the paper's
  per-object rule (move iff P·n·c > γ·p_w·s) moves a tip worth more than about 350·γ tokens, and
  Claude-Code tips are worth thousands whichever n is taken (the median tip written at γ = 4, 8,
  16 adds 2,496, 3,552, 4,288 tokens in its own radix segment, at P 0.56, 0.49, 0.42). Those
  writes pay: at γ = 4 the 94 states written serve 93 state hits from SSD (318 from DRAM). The
  paper's ≤ 10 % rests on DRAM holding the tips; kvwear does not tune a rule to reach it.
  **The oracle writes more states there, not fewer** (`bench/frontier.py`, same workload and
  tiers): every point of its line that dominates Gandalf γ = 4, 8, 16, 32 (28, 27, 26, 5 points)
  writes 0.21–0.41 of its SSD bytes as states, and the points nearest in miss ratio write 0.33,
  0.41, 0.39, 0.41 (two-pass γ = 55.43 0.121 at 57.6 GiB; γ = 192 0.129 at 53.1; γ = 128 0.114 at
  63.0; γ = 384 0.170 at 39.4). None with a share ≤ 0.10 dominates any of them: the oracle's best
  miss ratio at ≤ 0.10 is 0.199 (two-pass γ = 96, 38.6 GiB, 0.09), above Gandalf's 0.117–0.180. In
  this setting the ≤ 10 % target conflicts with the bound: the oracle, which knows the future,
  reaches Gandalf's miss ratios only by writing 21–41 % states (a measured bound, not a proven
  optimum: `policies/belady.py`). On Weka × Qwen3.5-27B (a 147 MiB state) Gandalf writes 0.05–0.06
  at γ = 4…16 and the oracle points dominating them 0.01–0.08.
- **Why the miss ratio is not monotone in γ** (Weka × Kimi-K3: γ = 8 0.126, γ = 16 0.117): not
  μ(t) (`budget=fixed`: μ ≡ 1), not the door's width (`move_candidates=4`: the same points), not
  the leaf's own move (without it γ = 4, 8, 16 miss 0.120, 0.189, 0.120: the bump grows), not the
  no-leaf fallback move (without it: the same points), not the candidate scan (`scan=16`: 0.112,
  0.126, 0.109) nor the idle model (`idle_model=exp`: 0.119, 0.130, 0.126). Nor is it V being
  large: V, the displaced next-hit value, is 0 at 88–97 % of the door's pricings (the SSD has room,
  or its cheapest victims are worth 0) and positive at 38, 67, 94 of 1,100, 980, 769 at γ = 4, 8,
  16. It is a cascade from a few decisions: γ = 8 writes 23 more states than γ = 16 (72 vs 49) and
  serves fewer state hits from SSD (72 vs 74) — dead writes (its live bytes 75.4 vs 64.9 GiB) that
  displaced useful ones. P prices the next hit whenever it comes; it does not ask whether the copy
  survives on the SSD until then. Dropping V (not the paper's rule) makes γ = 4, 8, 16 monotone
  within noise (0.115, 0.116, 0.118 at 114.4, 107.3, 92.2 GiB); so does the truer ghost count
  (`ghost_credit=inside`, above), at a cost elsewhere. Neither is taken: the inversion is
  reported, not tuned away. Nearby γ vary as much (γ = 3…24: 0.122, 0.122, 0.118, 0.121, 0.138,
  0.126, 0.119, 0.118, 0.117, 0.117, 0.126, 0.172), and a 1 % change of an unrelated knob moves a
  point by up to 0.018 (`min_idle_s` 0.9–1.1: γ = 4 0.116–0.134, γ = 8 0.122–0.140; γ = 16 stays
  at 0.117). Weka × Qwen3.5-27B is monotone in γ on these tiers (not on held-back Claude-Code
  traces: issue #29, above); on Mooncake the dips are ≤ 0.007 (Kimi-K3 γ = 0,
  1, 2, 4: 0.833, 0.830, 0.829, 0.834; Qwen3.5-27B 0.880, 0.876, 0.879, 0.872); the bytes fall
  with γ in every case.

Per-event work: objects sit in LRU lists per tier × class, inside which D is non-increasing in
idle time, so the cheapest object of a list is (up to the hybrid adjustments) its head and a
decision looks at O(W) heads (W ≈ 2 kinds × 2 reuse classes × ~10 length classes, up to `scan`
entries each for the leaf and root-side tests). A list's scan is kept until an entry of it, or the
residency of what its tests read, changes, so the evictions of one request rescan a few lists.
`split_victims` is off: a move must write the root side of a segment, not the leaf-side part the
simulator would cut.

Must not: do I/O, read the wall clock, keep global state.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import OrderedDict
from dataclasses import dataclass
from itertools import islice
from operator import itemgetter
from typing import Literal

from kvwear.errors import KvwearError
from kvwear.policies._estimators import ReuseHistogram, SlidingExpFit, WriteBudget, move_cost
from kvwear.policies._history import GhostTable
from kvwear.policies.base import POLICIES, YEAR_S, Policy, PolicyParams, RequestInfo, SimContext, param
from kvwear.policies.tree import DRAM, FULL, HBM, LINEAR, SSD, Obj, Segment, State, depth_blocks


@dataclass(frozen=True)
class GandalfParams(PolicyParams):
    gamma: float = param(8.0, sweep=(0.0, 64.0),
                         help="weight of the SSD wear cost of a move against a drop's recompute cost", valid=(0.0, 1e6))
    dwpd: float = param(1.0, sweep=(0.1, 10.0),
                        help="write budget in drive writes per day of the simulated SSD (budget=ratio)",
                        valid=(0.0, 1e6), above=True)
    budget: Literal["fixed", "ratio"] = param("fixed", sweep=("fixed", "ratio"),
                                              help="μ(t) rule: 1, or (written/budget)^gain")
    budget_gain: float = param(1.0, sweep=(0.5, 2.0), help="exponent of the μ(t) ratio rule",
                               valid=(0.0, 100.0), above=True)
    idle_model: Literal["hist", "exp"] = param(
        "hist", sweep=("hist", "exp"),
        help="P(idle≥w): empirical reuse-gap survival per class, or q·e^(−λw)")
    min_idle_s: float = param(1.0, sweep=(0.1, 60.0), help="floor of the idle time w in D and M",
                              valid=(0.0, YEAR_S), above=True)
    window_s: float = param(3600.0, sweep=(600.0, 7200.0), help="time constant of the estimators",
                            valid=(0.0, YEAR_S), above=True)
    scan: int = param(4, sweep=(1, 16), help="entries per list examined for the leaf and root-side tests",
                      valid=(1, 10**6))
    move_candidates: int = param(1, sweep=(1, 64),
                                 help="root-side move candidates judged per kind × size class list", valid=(1, 10**6))
    state_tokens: Literal["segment", "marginal", "prefix"] = param(
        "marginal", sweep=("segment", "marginal", "prefix"),
        help="n of a state: tokens since the previous checkpoint position on its path, tokens back to "
             "the deepest resident state above it, or its whole prefix")
    superseded_weight: float = param(
        0.0, sweep=(0.0, 1.0),
        help="P multiplier for a state whose prefix a later request already extended", valid=(0.0, 1.0))
    ghost_credit: Literal["ends", "inside"] = param(
        "ends", sweep=("ends", "inside"),
        help="where a passing request finds a dropped state to credit: at segment ends, or anywhere")
    ghosts: int = param(1 << 20, sweep=(0, 1 << 22), help="forgotten objects remembered for reuse counts",
                        valid=(0, 1 << 30))
    stranded: Literal["priced", "zero"] = param(
        "priced", sweep=("priced", "zero"),
        help="an object below a prefix gap (an ancestor resident in no tier): priced as if its prefix "
             "were resident (the paper's per-object price), or worth 0 and the SSD's first victim")

    def __post_init__(self) -> None:
        if (self.gamma < 0 or self.dwpd <= 0 or self.min_idle_s <= 0 or self.window_s <= 0 or self.scan < 1
                or self.move_candidates < 1 or self.ghosts < 0 or not 0 <= self.superseded_weight <= 1):
            raise ValueError("need gamma >= 0, dwpd > 0, min_idle_s > 0, window_s > 0, scan >= 1, "
                             "move_candidates >= 1, ghosts >= 0, 0 <= superseded_weight <= 1")


def _rc(refs: int) -> int:
    """Reuse class: 0 = not reused since it was (re)inserted, 1 = reused."""
    return 0 if refs <= 1 else 1


def _size_class(obj: Obj) -> int:
    """log₂ of the prefix length (in 256-token units) at the object's end."""
    if isinstance(obj, Segment):
        return (obj.end_tokens >> 8).bit_length()
    assert isinstance(obj, State)
    return (obj.seg.end_tokens >> 8).bit_length()


def _leads_nowhere(seg: Segment) -> bool:
    """Hybrid models: no resident state at its end and no resident child, so the segment cannot
    be part of any hit (a hit needs a resident state at or below it): dropping it loses nothing,
    since a request that later checkpoints a state below it recomputes it anyway."""
    st = seg.state
    if st is not None and st.tiers:
        return False
    for c in seg.children.values():  # noqa: SIM110 - a loop, not any()/all() over a generator: hot
        if c.tiers:
            return False
    return True


def _gap_above(obj: Obj) -> bool:
    """A segment on the path above `obj` is resident in no tier: no hit can reach `obj`."""
    seg = obj.seg if isinstance(obj, State) else obj.parent if isinstance(obj, Segment) else None
    while seg is not None and seg.parent is not None:
        if not seg.tiers:
            return True
        seg = seg.parent
    return False


def _superseded(st: State) -> bool:
    """A later request extended the state's prefix without branching and checkpointed deeper: down
    the single-child chain below it (up to 8 segments) a resident state, which is what the next
    request on that path will use. A state at a branch point is not superseded (a request may
    still end between it and the deeper state, as Marconi's branch points show)."""
    seg = st.seg
    for _ in range(8):
        ch = seg.children
        if len(ch) != 1:
            return False
        seg = next(iter(ch.values()))
        d = seg.state
        if d is not None and d.tiers:
            return True
    return False


def _fallback_tokens(seg: Segment) -> int:
    """Where a request ending at `seg` would hit without the state there: the end (in tokens)
    of the deepest segment above it holding a resident state, 0 if none."""
    a = seg.parent
    while a is not None and a.parent is not None:
        st = a.state
        if st is not None and st.tiers:
            return a.end_tokens
        a = a.parent
    return 0


ClassKey = tuple[int, int, int]  # kind, reuse class, size class


@POLICIES.register("gandalf")
class GandalfPolicy(Policy[GandalfParams]):
    """DRAM-first; on DRAM pressure drop or move, whichever costs less (wear vs recompute)."""

    split_victims = False
    summary = "SSD-lifetime-aware: drop cold DRAM leaves or move root-side nodes, next-hit value vs wear"

    def __init__(self, params: GandalfParams, ctx: SimContext) -> None:
        super().__init__(params, ctx)
        p = self.p
        cfg = ctx.config
        self.c_token = cfg.usd_per_recomputed_token
        self._hist_model = p.idle_model == "hist"
        # _vd_new writes value() out for the default model only
        self._value_inline = p.idle_model == "hist" and p.stranded == "priced" and p.state_tokens == "marginal"
        self._state_tokens = p.state_tokens
        self._superseded_weight = p.superseded_weight
        self._min_idle_s = p.min_idle_s
        self._ghost_inside = p.ghost_credit == "inside"
        # state → tokens since the previous checkpoint position, when it was created ("segment")
        self._own_tokens: dict[Obj, int] = {}
        # (value P·n·c in $, D in $/byte/s) per object, valid until the next access of anything
        self._vcache: dict[Obj, tuple[float, float]] = {}
        # per DRAM list, what victim()'s scan of its first entries found: (its drop candidate or
        # None, its move candidates); D is looked up at each decision. Valid while nothing the
        # scan read changes: the list's entries and the residency of their parents, children,
        # states and segments (see _rescan_near), across requests. HBM residency reaches the
        # policy through no hook: with an HBM tier the scans are redone every request (the
        # simulator changes HBM residency before a request's DRAM evictions, not during them)
        self._scans: dict[ClassKey, tuple[Obj | None, list[Obj]]] = {}
        self._hbm = ctx.capacity_bytes[HBM] > 0
        self.p_w = cfg.ssd_usd_per_byte_written
        day = 86400.0
        cap = max(ctx.capacity_bytes[SSD], 1)
        # TBW·t/T_target with TBW = cap·DWPD·365·years and T_target = years
        self.budget = WriteBudget(tbw_bytes=cap * p.dwpd * 365.0, target_lifetime_s=365.0 * day,
                                  gain=p.budget_gain, mode=p.budget)
        self._started = False
        # lists: tier → class key → LRU of objects; DRAM copies with an SSD copy live in `clean`
        self.lists: dict[int, dict[ClassKey, OrderedDict[Obj, None]]] = {DRAM: {}, SSD: {}}
        self.where: dict[int, dict[Obj, ClassKey]] = {DRAM: {}, SSD: {}}
        self.clean: OrderedDict[Obj, None] = OrderedDict()
        # estimators per class (the exponential fits under idle_model="exp" only); pdata = (last
        # time it served a request, requests served)
        self.hists: dict[ClassKey, ReuseHistogram] = {}
        self.fits: dict[ClassKey, SlidingExpFit] = {}
        self.ghosts = GhostTable(p.ghosts)
        self._last_decay_s = 0.0
        self.hybrid = ctx.hybrid
        self._decision: tuple[Obj, bool] | None = None
        self._state_credited = False  # one state reuse per request (the one that served it)
        self._credited_end = 0  # depth (blocks) of the dropped state credited for this request
        self._victims: tuple[list[int], list[float]] | None = None
        self._last_victim: tuple[float, int, float] | None = None
        # resident objects below a prefix gap (`stranded="zero"`; empty under "priced", where every
        # use is skipped), and those of them on the SSD
        self._zero_stranded = p.stranded == "zero"
        self.stranded: dict[Obj, None] = {}
        self.stranded_ssd: OrderedDict[Obj, None] = OrderedDict()
        self.stranded_ssd_bytes = 0

    # --- estimators ---------------------------------------------------------------------------
    def begin_request(self, req: RequestInfo) -> None:
        self._victims = None
        self._vcache.clear()  # the clock moved: every value and D changes
        if self._hbm:
            self._scans.clear()
        now = req.arrival_s
        self._state_credited = False
        self._credited_end = 0
        if not self._started:
            self._started = True
            self.budget.start_s = now
            self._last_decay_s = now
        dt = now - self._last_decay_s
        if dt > self.p.window_s / 256:  # decay in small steps, not at every request
            f = math.exp(-dt / self.p.window_s)
            for h in self.hists.values():
                h.decay(f)
            self._last_decay_s = now

    def _observe_access(self, obj: Obj, prev: tuple[float, int] | None) -> None:
        """Count a request `obj` served: a reuse (with its gap) if it, or its ghost, served before."""
        now = self.ctx.now_s
        k = obj.kind
        sc = _size_class(obj)
        if prev is not None:
            last_s, refs = prev
            before = (k, _rc(refs), sc)
            self._hist(before).reused(now - last_s)
            if not self._hist_model:  # the exponential fits are read by the "exp" model only
                self.fits[before].observe(now, now - last_s)
            refs += 1
        else:
            refs = 1
        self._hist((k, _rc(refs), sc)).entered()
        obj.pdata = (now, refs)

    def _credit_ghost_state(self, seg: Segment) -> None:
        """A request passes the end of `seg` (`ghost_credit="inside"`: any position in it), deeper
        than its hit: a state dropped there would have served it (had it been kept with its KV).
        Only the deepest such state is credited."""
        ctx = self.ctx
        end = seg.start + seg.n
        if self._state_credited or end <= ctx.hit_blocks:
            return
        if self._ghost_inside:
            # a dropped state may sit inside `seg`: when its KV was dropped too, the path is
            # recreated as one segment through the old checkpoint position, with this request's
            # own new state at its end
            lo = max(ctx.hit_blocks - seg.start, 0)
        else:
            if seg.state is not None and seg.state.tiers:
                return
            lo = seg.n - 1
        ghosts = self.ghosts
        ns, keys = seg.ns, seg.keys
        for i in range(seg.n - 1, lo - 1, -1):
            gone = ghosts.pop(LINEAR, ns, keys[i])
            if gone is not None:
                pos = seg.start + i + 1
                tokens = seg.end_tokens if i == seg.n - 1 else pos * seg.block_tokens
                sc = (tokens >> 8).bit_length()
                self._hist((LINEAR, _rc(gone[1]), sc)).reused(ctx.now_s - gone[0])
                self._state_credited = True
                self._credited_end = pos
                return

    def _hist(self, key: ClassKey) -> ReuseHistogram:
        h = self.hists.get(key)
        if h is None:
            h = self.hists[key] = ReuseHistogram(self.p.window_s)
            if not self._hist_model:
                self.fits[key] = SlidingExpFit(self.p.window_s, prior_rate_per_s=1.0 / 60.0)
        return h

    @staticmethod
    def _ghost_key(obj: Obj) -> tuple[int, int, int]:
        if isinstance(obj, Segment):
            return (FULL, obj.ns, obj.keys[0])
        assert isinstance(obj, State)
        return (LINEAR, obj.seg.ns, obj.seg.keys[-1])

    def _forget(self, obj: Obj) -> None:
        """`obj` left every tier: remember when it last served so a comeback counts as a reuse."""
        if obj.pdata is None or (isinstance(obj, Segment) and not obj.n):
            return
        self.ghosts.put(*self._ghost_key(obj), obj.pdata)

    def class_of(self, obj: Obj) -> ClassKey:
        pd = obj.pdata
        # _rc and _size_class, written out (called for every candidate priced)
        tokens = obj.end_tokens if isinstance(obj, Segment) else obj.seg.end_tokens  # type: ignore[attr-defined]
        return (obj.kind, 0 if (pd[1] if pd else 1) <= 1 else 1, (tokens >> 8).bit_length())

    def p_idle(self, idle_s: float, key: ClassKey) -> float:
        """P(idle ≥ w): the probability that an object of this class idle for w is reused."""
        h = self.hists.get(key) or self._hist(key)
        if self._hist_model:
            return h.p_reuse(idle_s)
        q = h.p_reuse(0.0)
        return q * math.exp(-self.fits[key].rate(self.ctx.now_s) * idle_s)

    def _idle_s(self, obj: Obj) -> float:
        last = obj.pdata[0] if obj.pdata is not None else obj.last_s
        w = self.ctx.now_s - last
        return w if w > self.p.min_idle_s else self.p.min_idle_s

    def value(self, obj: Obj, key: ClassKey | None = None) -> float:
        """The next hit's value P(idle ≥ w)·n·c in dollars (0 for what no hit can use)."""
        if self._zero_stranded and obj in self.stranded:
            return 0.0
        if isinstance(obj, Segment):
            if self.hybrid and _leads_nowhere(obj):
                return 0.0
            n = obj.tokens
            weight = 1.0
        else:
            assert isinstance(obj, State)
            # the weight first: a superseded state at weight 0 (the default) needs no walk up
            weight = self._superseded_weight if self.hybrid and _superseded(obj) else 1.0
            if weight == 0.0:
                return 0.0
            n = obj.seg.end_tokens
            if self._state_tokens == "marginal":
                n -= _fallback_tokens(obj.seg)
            elif self._state_tokens == "segment":
                # its own segment, as measured when it was created, or less once a request
                # checkpoints between (the deepest resident state above is a checkpoint too)
                n = min(self._own_tokens.get(obj, n), n - _fallback_tokens(obj.seg))
        if key is None:
            key = self.class_of(obj)
        last = obj.pdata[0] if obj.pdata is not None else obj.last_s
        idle = self.ctx.now_s - last
        if idle < 0.0:
            idle = 0.0
        if self._hist_model:  # p_idle, inlined for the default model
            h = self.hists.get(key) or self._hist(key)
            return h.p_reuse(idle) * weight * n * self.c_token
        return self.p_idle(idle, key) * weight * n * self.c_token

    def _checkpoint_above_blocks(self, st: State) -> int:
        """Where the previous checkpoint position on the path of a new state `st` ends, in
        blocks (0 if none): the deepest position above it holding a state, resident or dropped
        (a dropped one is known by its ghost, which may sit inside a segment recreated through
        it). Called when `st` is placed, before the request's segments pop the ghosts they credit."""
        ghosts = self.ghosts
        seg = st.seg
        top = seg.n - 1  # positions (block indices) examined in `seg`: below its own end
        while seg.parent is not None:
            if top == seg.n and seg.state is not None and seg.state.tiers:
                return seg.start + seg.n
            ns, keys = seg.ns, seg.keys
            for i in range(top - 1, -1, -1):
                if ghosts.has(LINEAR, ns, keys[i]):
                    return seg.start + i + 1
            seg = seg.parent
            top = seg.n
        return 0

    def _vd(self, obj: Obj, key: ClassKey) -> tuple[float, float]:
        """(value, D = value/(s·w)), memoized until the next access changes the estimators."""
        got = self._vcache.get(obj)
        return got if got is not None else self._vd_new(obj, key)

    def _vd_new(self, obj: Obj, key: ClassKey) -> tuple[float, float]:
        """_vd for an object not in the memo (callers that looked it up already call this): its
        (value, D), computed and memoized. Most of the policy's time is here (the drop candidates'
        D and V's table: ~400 k values on Mooncake × Kimi-K3, where every request's new clock
        changes every value), so for the default model (hist, priced, marginal) value() is
        written out — with _leads_nowhere, _superseded, _fallback_tokens, `tokens`, `end_tokens`
        and the idle time — in the same operations and order, calling ReuseHistogram.p_reuse (its
        one definition, called rather than copied: one call per value); the other
        models call value()."""
        pd = obj.pdata
        now = self.ctx.now_s
        last = pd[0] if pd is not None else obj.last_s
        if not self._value_inline:
            v = self.value(obj, key)
        else:
            n = 0  # tokens the next hit saves; 0 with weight 0.0 below: worth 0, no estimator read
            weight = 1.0
            if isinstance(obj, Segment):
                nowhere = False
                if self.hybrid:
                    st = obj.state
                    if st is None or not st.tiers:
                        nowhere = True
                        for c in obj.children.values():
                            if c.tiers:
                                nowhere = False
                                break
                if nowhere:
                    weight = 0.0
                else:
                    k = obj.n
                    n = (k - 1) * obj.block_tokens + obj.last_tokens if k else 0
            else:
                assert isinstance(obj, State)
                seg = obj.seg
                if self.hybrid:
                    s = seg
                    for _ in range(8):
                        ch = s.children
                        if len(ch) != 1:
                            break
                        s = next(iter(ch.values()))
                        d = s.state
                        if d is not None and d.tiers:
                            weight = self._superseded_weight
                            break
                if weight != 0.0:
                    fb = 0
                    a = seg.parent
                    while a is not None and a.parent is not None:
                        st = a.state
                        if st is not None and st.tiers:
                            k = a.n
                            fb = (a.start + k - 1) * a.block_tokens + a.last_tokens if k else a.start * a.block_tokens
                            break
                        a = a.parent
                    k = seg.n
                    n = ((seg.start + k - 1) * seg.block_tokens + seg.last_tokens if k
                         else seg.start * seg.block_tokens) - fb
            if weight == 0.0:
                v = 0.0
            else:
                idle = now - last
                if idle < 0.0:
                    idle = 0.0
                h = self.hists.get(key) or self._hist(key)
                v = h.p_reuse(idle) * weight * n * self.c_token
        w = now - last
        floor = self._min_idle_s
        nb = obj.nbytes
        got = self._vcache[obj] = (v, v / ((nb if nb > 1 else 1) * (w if w > floor else floor)))
        return got

    def drop_cost(self, obj: Obj) -> float:
        """D = P(idle ≥ w)·n·c/(s·w): dollars per byte freed per second of idleness."""
        return self._vd(obj, self.class_of(obj))[1]

    def displaced_value(self, over_bytes: int) -> float:
        """V: the next-hit value of the SSD victims that free `over_bytes` (lowest D first;
        stranded SSD objects, worth 0, go first)."""
        zero = self._zero_stranded  # the stranded sets stay empty under "priced"
        if zero:
            over_bytes -= self.stranded_ssd_bytes
        if over_bytes <= 0:
            return 0.0
        if self._victims is None:
            entries: list[tuple[float, int, float]] = []
            scan = self.p.scan
            stranded = self.stranded_ssd
            vcache = self._vcache
            vd_new = self._vd_new
            for key, od in self.lists[SSD].items():
                for o in islice(od, scan):
                    if not (zero and o in stranded):
                        v, d = vcache.get(o) or vd_new(o, key)
                        entries.append((d, o.nbytes, v))
            entries.sort(key=itemgetter(0))  # by D only, stable: ties keep the lists' order
            cb: list[int] = []
            cv: list[float] = []
            tb, tv = 0, 0.0
            for _, b, v in entries:
                tb += b
                tv += v
                cb.append(tb)
                cv.append(tv)
            self._victims = (cb, cv)
            self._last_victim = entries[-1] if entries else None
        cb, cv = self._victims
        if not cb:
            return 0.0
        i = bisect_left(cb, over_bytes)
        if i < len(cb):
            return cv[i]
        last = self._last_victim
        assert last is not None
        # beyond the examined victims: the last one's value per byte
        return cv[-1] + (over_bytes - cb[-1]) * last[2] / max(last[1], 1)

    def fee(self, obj: Obj) -> float:
        """γ·μ(t)·p_w·s plus the value V of the SSD victims the write displaces, in dollars."""
        ctx = self.ctx
        mu = self.budget.mu(ctx.now_s)
        over = obj.nbytes - (ctx.capacity_bytes[SSD] - ctx.used_bytes[SSD])  # ctx.free_bytes(SSD), inlined
        # move_cost, inlined (the same operations in the same order; tests/policies/test_adv_policies.py pins it)
        return self.p.gamma * mu * self.p_w * obj.nbytes + self.displaced_value(over)

    # --- list bookkeeping ---------------------------------------------------------------------
    def _strand(self, obj: Obj) -> None:
        if obj not in self.stranded:
            self.stranded[obj] = None
            if obj.tiers & SSD:
                self.stranded_ssd[obj] = None
                self.stranded_ssd_bytes += obj.nbytes

    def _unstrand(self, obj: Obj) -> None:
        if self.stranded.pop(obj, 0) is None and self.stranded_ssd.pop(obj, 0) is None:
            self.stranded_ssd_bytes -= obj.nbytes

    def _mark_below(self, seg: Segment, gap: bool) -> None:
        """The resident objects below `seg` reachable from it through resident segments: stranded
        (`gap`: `seg` just left every tier) or reachable again (`seg` is being recreated)."""
        mark = self._strand if gap else self._unstrand
        stack = [seg]
        while stack:
            s = stack.pop()
            st = s.state
            if st is not None and st.tiers:
                mark(st)
            for c in s.children.values():
                if c.tiers:
                    mark(c)
                    stack.append(c)
        self._vcache.clear()
        self._scans.clear()
        self._victims = None

    def _rescan_near(self, obj: Obj, old: int) -> None:
        """`obj`'s residency changed from `old` to `obj.tiers`: the scans of the DRAM lists holding
        what victim() tests by it are redone — its parent (or a state's segment) when it became
        resident or left every tier (droppable only with nothing resident below), its children
        and state when it became or stopped being DRAM-only (root-side only below a node that is
        not). Its own list is redone by _enlist/_delist."""
        scans = self._scans
        if not scans:
            return
        new = obj.tiers
        where = self.where[DRAM]
        up = obj.seg if isinstance(obj, State) else obj.parent if isinstance(obj, Segment) else None
        if bool(old) != bool(new) and up is not None:
            key = where.get(up)
            if key is not None:
                scans.pop(key, None)
        on_both = DRAM | SSD
        if isinstance(obj, Segment) and ((old & on_both) == DRAM) != ((new & on_both) == DRAM):
            below: list[Obj] = list(obj.children.values())
            if obj.state is not None:
                below.append(obj.state)
            for o in below:
                key = where.get(o)
                if key is not None:
                    scans.pop(key, None)

    def _enlist(self, obj: Obj, tier: int) -> None:
        key = self.class_of(obj)
        if tier == DRAM:
            self._scans.pop(key, None)
        lists = self.lists[tier]
        od = lists.get(key)
        if od is None:
            od = lists[key] = OrderedDict()
        od[obj] = None
        self.where[tier][obj] = key

    def _delist(self, obj: Obj, tier: int) -> bool:
        key = self.where[tier].pop(obj, None)
        if key is None:
            return False
        if tier == DRAM:
            self._scans.pop(key, None)
        del self.lists[tier][key][obj]
        return True

    def _cheapest(self, tier: int) -> tuple[float, Obj] | None:
        best: tuple[float, Obj] | None = None
        for key, od in self.lists[tier].items():
            if od:
                o = next(iter(od))
                d = self._vd(o, key)[1]
                if best is None or d < best[0]:
                    best = (d, o)
        return best

    # --- notifications ------------------------------------------------------------------------
    def place(self, obj: Obj) -> int:
        self._victims = None  # values change with this access
        if self._vcache:
            self._vcache.clear()
        ctx = self.ctx
        prev = obj.pdata  # a ghost segment still in the tree keeps its record
        if prev is None:
            prev = self.ghosts.pop(*self._ghost_key(obj))
        if isinstance(obj, Segment):
            seg = obj
            if self.hybrid and self.ghosts:
                self._credit_ghost_state(seg)
            # recreated inside what served (or would have served) the request: keeping it would
            # have been part of that hit
            if prev is not None and not (seg.start <= ctx.hit_blocks
                                         or seg.start + seg.n <= self._credited_end):
                prev = None
        else:
            assert isinstance(obj, State)
            if self._state_tokens == "segment":
                self._own_tokens[obj] = obj.seg.end_tokens - self._checkpoint_above_blocks(obj) * obj.seg.block_tokens
            if prev is not None:
                # the request's own state, recreated where it was dropped: it would have served
                # the request iff the hit ended above it
                end = depth_blocks(obj)
                if self._state_credited or end <= ctx.hit_blocks:
                    prev = None
                else:
                    self._state_credited = True
                    self._credited_end = end
        self._observe_access(obj, prev)
        return DRAM

    def added(self, obj: Obj, tier: int) -> None:
        self._rescan_near(obj, obj.tiers & ~tier)
        if self._zero_stranded and obj.tiers == tier:  # resident again (or new)
            if _gap_above(obj):
                self._strand(obj)
            elif isinstance(obj, Segment) and self.stranded and (obj.children or obj.state is not None):
                self._mark_below(obj, gap=False)  # the gap is filled: what hangs below is reachable
        if tier == DRAM:
            if obj.tiers & SSD:
                self.clean[obj] = None
            else:
                self._enlist(obj, DRAM)
        elif tier == SSD:
            self._victims = None
            self.budget.record_write(obj.nbytes)
            self._enlist(obj, SSD)
            if self._zero_stranded and obj in self.stranded and obj not in self.stranded_ssd:
                self.stranded_ssd[obj] = None
                self.stranded_ssd_bytes += obj.nbytes
            if self._delist(obj, DRAM):
                self.clean[obj] = None

    def removed(self, obj: Obj, tier: int) -> None:
        self._rescan_near(obj, obj.tiers | tier)
        c = self._vcache
        if c:
            c.pop(obj, None)
            if isinstance(obj, Segment):
                up = obj.parent
            else:
                assert isinstance(obj, State)
                up = obj.seg
            if up is not None:
                c.pop(up, None)
                if up in self.where[SSD]:
                    self._victims = None  # an SSD entry's value may change
        if tier == SSD or obj in self.where[SSD]:
            self._victims = None  # the SSD lists change
        zero = self._zero_stranded
        if zero and tier == SSD and self.stranded_ssd.pop(obj, 0) is None:
            self.stranded_ssd_bytes -= obj.nbytes
        if not obj.tiers:
            self._forget(obj)
            self._own_tokens.pop(obj, None)
            if zero:
                self.stranded.pop(obj, None)
                if isinstance(obj, Segment):
                    # a prefix gap: what hangs below can serve no hit until a request recreates it
                    self._mark_below(obj, gap=True)
        if tier == DRAM:
            if not self._delist(obj, DRAM):
                self.clean.pop(obj, None)
        elif tier == SSD:
            self._delist(obj, SSD)
            if obj in self.clean:
                del self.clean[obj]
                self._enlist(obj, DRAM)

    def touched(self, obj: Obj) -> None:
        self._victims = None  # values and the SSD lists' order change
        if self._vcache:
            self._vcache.clear()
        ctx = self.ctx
        if isinstance(obj, Segment):
            seg = obj
            served = seg.start + seg.n <= ctx.hit_blocks
            if self.hybrid and self.ghosts and not served:
                self._credit_ghost_state(seg)
        else:
            served = obj is ctx.hit_state and not self._state_credited
            if served:
                self._state_credited = True
        if served:
            self._observe_access(obj, obj.pdata)
        elif obj.pdata is not None:
            # passed, not served: a live path keeps its recency, not a reuse
            obj.pdata = (ctx.now_s, obj.pdata[1])
        for tier in (DRAM, SSD):
            if self._delist(obj, tier):
                self._enlist(obj, tier)
        if obj in self.clean:
            self.clean.move_to_end(obj)

    def split(self, head: Segment, tail: Segment, evicting_tier: int) -> None:
        # the head joins the tail's lists and becomes its parent (the tail's root-side test), in
        # its parent's children in place of the tail, with the tail's residency
        where = self.where[DRAM]
        for o in (tail, head.parent):
            key = where.get(o) if o is not None else None
            if key is not None:
                self._scans.pop(key, None)
        if tail in self.where[SSD]:
            self._victims = None  # the SSD lists change
        for tier in (DRAM, SSD):
            key = self.where[tier].get(tail)
            if key is not None:
                self.lists[tier][key][head] = None
                self.where[tier][head] = key
        if tail in self.clean:
            self.clean[head] = None
        if self._zero_stranded and tail in self.stranded:
            # the head takes its share of the tail's bytes, already counted
            self.stranded[head] = None
            if tail in self.stranded_ssd:
                self.stranded_ssd[head] = None

    # --- decisions ----------------------------------------------------------------------------
    @staticmethod
    def _run_of(obj: Obj) -> tuple[Obj, int]:
        """The DRAM-only run from `obj` up to the SSD part (or the root): (its root-side end, the
        node a move may write first; the run's bytes, `obj` included)."""
        a: Segment
        if isinstance(obj, Segment):
            a = obj
            nbytes = obj.nbytes
        else:
            assert isinstance(obj, State)
            seg = obj.seg
            if not (seg.tiers & DRAM and not seg.tiers & SSD):
                return obj, obj.nbytes
            a = seg
            nbytes = obj.nbytes + seg.nbytes
        par = a.parent
        while par is not None and par.parent is not None and par.tiers & DRAM and not par.tiers & SSD:
            a = par
            nbytes += a.nbytes
            par = a.parent
        return a, nbytes

    def _root_side_of(self, obj: Obj) -> Obj:
        """The root-side end of the DRAM-only run above `obj` (the node a move may write)."""
        return self._run_of(obj)[0]

    def _move_price(self, obj: Obj) -> tuple[bool, float]:
        """(door open: value > fee, M = fee/(s·w)) of moving `obj`."""
        v = self.value(obj)
        f = self.fee(obj)
        return v > f, f / (max(obj.nbytes, 1) * self._idle_s(obj))

    def _scan(self, od: OrderedDict[Obj, None]) -> tuple[Obj | None, list[Obj]]:
        """One DRAM list's first entries (up to `scan`): its first droppable object and its first
        `move_candidates` root-side objects (victim() prices them, once per decision)."""
        drop: Obj | None = None
        movers: list[Obj] = []
        scan = self.p.scan
        per_list = self.p.move_candidates
        ssd_cap = self.ctx.capacity_bytes[SSD]
        on_both = DRAM | SSD
        for o in islice(od, scan):
            if drop is not None and len(movers) >= per_list:
                break
            if drop is None:
                ok = True
                if isinstance(o, Segment):
                    st = o.state
                    if st is not None and st.tiers:
                        ok = False
                    else:
                        for c in o.children.values():
                            if c.tiers:
                                ok = False
                                break
                if ok:
                    drop = o
            if len(movers) < per_list and ssd_cap >= o.nbytes:
                # root-side (a node a move may write, so the SSD part of every path stays a
                # prefix): a segment's parent is the root or not DRAM-only, a state's segment
                # is not DRAM-only
                if isinstance(o, Segment):
                    par = o.parent
                    if par is not None and par.parent is not None and par.tiers & on_both == DRAM:
                        continue
                elif o.seg.tiers & on_both == DRAM:  # type: ignore[attr-defined]
                    continue
                movers.append(o)
        return drop, movers

    def victim(self, tier: int, need_bytes: int) -> Obj:
        self._decision = None
        if tier == SSD:
            if self.stranded_ssd:
                return next(iter(self.stranded_ssd))  # worth 0: no price can beat it
            head = self._cheapest(SSD)
            if head is None:
                raise KvwearError("gandalf: SSD over capacity with no SSD object listed")
            return head[1]
        if self.clean:
            return next(iter(self.clean))
        drop: tuple[float, Obj] | None = None
        coldest: Obj | None = None
        movers: list[Obj] = []
        ssd_cap = self.ctx.capacity_bytes[SSD]
        scans = self._scans
        hybrid = self.hybrid
        vd = self._vd
        vd_new = self._vd_new
        vcache = self._vcache
        # the hot loop of the policy, over the lists in order; a list's scan is kept until what it
        # read changes (one request's evictions change a few lists, see _rescan_near)
        for key, od in self.lists[DRAM].items():
            if not od:
                continue
            if coldest is None:
                coldest = next(iter(od))
            got = scans.get(key)
            if got is None:
                got = scans[key] = self._scan(od)
            o, ms = got
            if o is not None:
                # D is needed for a list's first droppable object only; a droppable segment of a
                # hybrid model leads nowhere: worth 0
                if hybrid and o.kind == FULL:
                    d = 0.0
                else:
                    vdo = vcache.get(o) or vd_new(o, key)
                    d = vdo[1]
                if drop is None or d < drop[0]:
                    drop = (d, o)
            if ms:
                movers += ms
        if coldest is None:
            raise KvwearError("gandalf: DRAM over capacity with no DRAM object listed")
        if drop is not None and drop[0] == 0.0:
            self._decision = (drop[1], False)  # worthless: no move can beat it
            return drop[1]
        if not movers:
            m = self._root_side_of(coldest)
            if m.nbytes <= ssd_cap:
                movers.append(m)
        best: tuple[float, Obj] | None = None
        fallback: tuple[float, Obj] | None = None
        # a candidate whose M is no lower than the drop's D or the best open M so far cannot be
        # chosen (ties keep the earlier one), and the fallback is used only with neither: its
        # door (the next-hit value, a tree walk) is then not priced. Only under the histogram
        # model and when its class's histogram exists, where value() changes nothing (the
        # exponential fit expires samples when read, and value() creates a missing histogram)
        prune = self._hist_model
        hists = self.hists
        # fee(), _idle_s() and class_of() written out, the same operations in the same order; what
        # they read that no candidate's pricing changes is read once: μ(t) (no write happens
        # here), the SSD's free bytes, the clock
        ctx = self.ctx
        now = ctx.now_s
        wear = self.p.gamma * self.budget.mu(now) * self.p_w
        ssd_free = ssd_cap - ctx.used_bytes[SSD]
        stranded_bytes = self.stranded_ssd_bytes if self._zero_stranded else 0
        displaced_value = self.displaced_value
        floor = self.p.min_idle_s
        for o in movers:
            nb = o.nbytes
            over = nb - ssd_free
            # displaced_value() is 0.0 when nothing (stranded bytes aside) must leave the SSD
            f = wear * nb + (displaced_value(over) if over - stranded_bytes > 0 else 0.0)
            pd = o.pdata
            w = now - (pd[0] if pd is not None else o.last_s)
            m_cost = f / ((nb if nb > 1 else 1) * (w if w > floor else floor))
            if prune and ((drop is not None and m_cost >= drop[0]) or (best is not None and m_cost >= best[0])):
                sc = (o.end_tokens if isinstance(o, Segment) else o.seg.end_tokens) >> 8  # type: ignore[attr-defined]
                if (o.kind, 0 if (pd[1] if pd else 1) <= 1 else 1, sc.bit_length()) in hists:
                    continue
            if self.value(o) > f:
                if best is None or m_cost < best[0]:
                    best = (m_cost, o)
            elif fallback is None or m_cost < fallback[0]:
                fallback = (m_cost, o)
        if best is not None and (drop is None or best[0] < drop[0]):
            self._decision = (best[1], True)
            return best[1]
        if drop is not None:
            # the leaf about to be dropped may be worth moving itself (the paper weighs drop
            # against move for the object evicted; s and w cancel: move iff its next hit is
            # worth the fee). Under the prefix rule that move writes its whole DRAM-only run,
            # root-side end first, so the fee is the run's. Without this only root-side nodes
            # were priced, and where the root side is a hot shared prefix (w at its floor) their
            # M never beat a cold leaf's D: nothing was written at any γ ≥ 1 (issue #11)
            leaf = drop[1]
            end, run_bytes = self._run_of(leaf)
            if run_bytes <= ssd_cap:
                f = move_cost(self.p.gamma, self.budget.mu(self.ctx.now_s), self.p_w, run_bytes,
                              self.displaced_value(run_bytes - self.ctx.free_bytes(SSD)))
                if vd(leaf, self.class_of(leaf))[0] > f:
                    self._decision = (end, True)
                    return end
            self._decision = (drop[1], False)
            return drop[1]
        if fallback is not None:
            # no droppable leaf in reach: a move is the only way to free DRAM within the rules
            self._decision = (fallback[1], True)
            return fallback[1]
        # nothing satisfies the rules (an oversized run with no droppable leaf): drop the coldest
        self._decision = (coldest, False)
        return coldest

    def admit_to_ssd(self, obj: Obj) -> bool:
        dec = self._decision
        if dec is not None and dec[0] is obj:
            return dec[1]
        # an object too large for DRAM: write it iff its next hit is worth its fee
        if obj.nbytes > self.ctx.capacity_bytes[SSD]:
            return False
        self._victims = None
        return self._move_price(obj)[0]

// engine/ir/op.h: the op set of a Program. ENG_OPS below lists every op once (name, printed
// name, class); what each layer knows about an op is one row of that layer's op table,
// indexed by OpKind and built by make_op_table (engine/ir/op_table.h), which fails the build
// when an op has no row:
//   ir/       op.cpp kOpDefs (attribute schema, i32 inputs, in-place outputs, collective),
//             builder.cpp kInfer (shape inference), autodiff.cpp kVjps (VJP rule),
//             interpret.cpp kEvals (reference evaluation)
//   compile/  spmd.cpp kRules (SPMD rule: a factor map or a method), cost.cpp kCost (flops)
//   runtime/  executor.cpp kKernels (kernel dispatch), runtime.cpp kScratch (kernel scratch)
// Unary elementwise ops (OpClass::kUnary, e.g. gelu) are defined by one UnaryMath row in
// op.cpp; every table derives their entries from it. tests/ops/every_op_test.cpp runs every
// op through all of them. The set is small and fused on purpose: fused ops keep the program
// short, the temporaries few and the kernels fast.
//
// Semantics (shapes global; "saved" outputs exist for the backward pass):
//   kEmbedLookup   (table (V,E), ids i32 (B,T)) -> (B,T,E)                 gather rows
//   kOneHot        (ids i32 (B,T)) [depth=V] -> f32 (B,T,V)                 use_iota_embed path
//   kMatmul        (a, b) [a_split, b_split, trans_a, trans_b]               one sgemm:
//                    A = a viewed as (prod a[:a_split], prod a[a_split:]), transposed if trans_a;
//                    B likewise with b_split; out = A.B, shaped
//                    (trans_a ? a[a_split:] : a[:a_split]) ++ (trans_b ? b[:b_split] : b[b_split:])
//                    e.g. x (B,T,E) . wq (E,H,D): a_split=2, b_split=1 -> (B,T,H,D)
//   kRmsNorm       (x (...,E), scale (E)) [eps] -> y (...,E), rstd f32 (prod ...) saved
//   kRope          (x (B,T,H,D), positions i32 (B,T)) [min_timescale, max_timescale, inverse,
//                    interleave, llama31_scale]: pair i = (x[i], x[i+D/2]) rotated by
//                    pos / timescale_i (MaxText RotaryEmbedding); interleave: pair i =
//                    (x[2i], x[2i+1]) and llama31_scale: Llama 3.1's rescaled timescales
//                    (LLaMARotaryEmbedding; engine/tensor/rope_form.h)
//   kAttention     (q, k, v (B,T,H,D)[, segment_ids i32 (B,T)]) [scale] -> o (B,T,H,D),
//                    lse (B,H,T) saved; causal, and with segment ids key s is visible to query
//                    t only within t's segment (packed sequences: ids[b,s] == ids[b,t])
//   kSwiglu        (g, u) -> silu(g) * u
//   kLayerNorm     (x (...,E), scale (E), bias (E)) [eps] -> y (...,E), mean f32 (N), rstd f32
//                    (N) saved (N = prod ...): MaxText's Gpt3LayerNorm with use_bias, whose
//                    scale is stored zero-centred: y = (x - mean) * rstd * (1 + scale) + bias,
//                    rstd = 1 / sqrt(mean((x - mean)^2) + eps)
//   kBiasAdd       (x (...,F...), bias (F...)) -> x + bias, bias broadcast over x's leading
//                    dims (DenseGeneral's use_bias: bias has the kernel's output dims)
//   kRepeatKv      (x (B,T,Hkv,D)) [size=R, printed repeats=R] -> (B,T,Hkv*R,D): grouped-query
//                    attention's key/value heads for the query heads, each kv head repeated R
//                    times consecutively: out[b,t,h,d] = x[b,t,h / R,d] (PyTorch's repeat_kv,
//                    MaxText's GQA: query head h uses kv head h / (H / Hkv)). The model emits
//                    it only when Hkv < H. Any dtype (data movement).
//   kGelu          (x) -> x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   jax.nn.gelu's default
//                    (approximate=True); kGeluGrad (x, dy) -> dy * gelu'(x). A kUnary op.
//   kExp, kLog, kTanh, kReciprocal (x) -> exp(x), log(x), tanh(x), 1/x: kUnary ops (the
//                    front-end's np.exp, np.log, np.tanh and division; docs/frontend.md)
//   kSqrt, kAbs, kSign, kSin, kCos, kFloor, kLog1p, kExpm1 (x) -> numpy's functions of those
//                    names (sign(0) = 0; abs'(0) = sign(0) = 0 and floor' = sign' = 0, as
//                    JAX's rules): kUnary ops for the front-end's np.sqrt ... (docs/frontend.md)
//   kAdd, kMul     (a, b) same shape -> elementwise; float, or every operand i32 (jnp's int32
//                    arithmetic, wrapping: OpDef::integer, as kScale, kAllReduce, kReduceScatter)
//   kTranspose     (x) [permutation=new_shape] -> y with y.shape[i] = x.shape[perm[i]]
//                    (jax.lax.transpose); any dtype (data movement); rank <= kMaxTransposeRank;
//                    its VJP is the inverse permutation. The front-end's np.transpose, einsum, axis moves.
//   kCompare       (a, b) same shape, float or both i32 (OpDef::integer) [direction=dim: 0 eq,
//                    1 ne, 2 lt, 3 le, 4 gt, 5 ge] -> 1 where `a direction b` holds, else 0,
//                    in a's dtype (a float or i32 mask: the engine has no bool dtype); NaN
//                    compares as IEEE (only ne holds). No gradient (as lax.eq and friends).
//   kSelect        (pred, on_true, on_false) same shape, float -> pred != 0 ? on_true :
//                    on_false (jax.lax.select with a float mask as the predicate); the
//                    gradient goes to the chosen operand, none to pred.
//   kScale         (x) [scale] -> scale * x
//   kConvert       (x) [dtype] -> x cast to dtype
//   kConstraint    (x) [logical, drop] -> x       with_sharding_constraint on logical axes
//                    (drop: mesh axes removed from the resolved spec, e.g. fsdp for
//                    pipeline_fsdp_ag_once; the VJP constrains without drop);
//                    an identity on one device, a reshard (auto) or assert (explicit) later
//   kSoftmaxCrossEntropy (logits (B,T,V), targets i32 (B,T)) -> xent (B,T), lse (B,T) saved
//   kMaskedMeanLoss (xent (B,T), segmentation i32 (B,T)) -> loss (), total_weights ()
//                    loss = sum(xent * (seg != 0)) / (total_weights + 1e-8)   (MaxText)
//   -- pipeline (data movement; dtype-agnostic; engine/model/pipeline.cpp) --
//   kReshape       (x) [new_shape] -> x reinterpreted row-major as new_shape (same numel)
//   kSlice         (x) [dim, start, size] -> x[start : start + size] along dim
//   kPad           (x) [dim, start, size] -> zeros with dim of length size, x placed at
//                    [start, start + x.dim) along dim (the transpose of kSlice)
//   kConcat        (x0, x1, ...) [dim] -> the inputs concatenated along dim, in input order
//   kShift         (x) [dim, shift, source_start=start, source_size=size] -> out[i] =
//                    x[i - shift] along dim, zeros where i - shift is out of range (MaxText's
//                    _shift_right for shift = 1) or, with source_size > 0, outside the source
//                    rows [source_start, source_start + source_size) (one row: a move of
//                    that row alone, zeros elsewhere); its transpose is kShift by -shift
//                    from the rows the sources land on (shift_source_rows below).
//                    Partitioned over a sharded dim with one row per member it is a
//                    kCollectivePermute with fill_zero and the same source rows.
//   -- scanned layers (scan_layers, engine/model/llama.cpp) --
//   kIndexInDim    (x) [dim, index=start] -> x[..., start, ...] along dim, that dim removed
//                    (jax.lax.index_in_dim, keepdims=False): layer l's weight of a stacked
//                    (..., L, ...) parameter. Any dtype (data movement).
//   kAddIndexInDim (update[, acc]) [dim, index=start, size] -> acc with update added into
//                    slot start along dim (acc.at[..., start, ...].add(update)); without acc,
//                    zeros of dim length size: the transpose of kIndexInDim. The output
//                    updates acc in place, so a stacked gradient accumulates its layers'
//                    slices in one buffer. f32.
//   kIndexPerRow   (x (N, S, ...)) [indices=new_shape (S entries), axes=mesh_axes] -> (S, ...)
//                    out[s] = x[indices[s], s]: each row s of dim 1 takes its own slot of
//                    dim 0 (jax.vmap of lax.index_in_dim over dim 1 with a per-row index;
//                    MaxText's per-stage selection of the current repeat's weights from
//                    (R, S, lps, ...)). Any dtype (data movement). In a per-device program
//                    dim 1 holds this device's block of rows and `axes` the mesh axes that
//                    split it: local row s is global row rank(axes) * S_local + s (empty
//                    axes: rank 0, the global form), so the selection moves no data.
//   kAddIndexPerRow (update (S, ...)[, acc (N, S, ...)]) [indices, size=N, axes] -> acc with
//                    update[s] added at [indices[s], s] (without acc: zeros); the transpose
//                    of kIndexPerRow, in place on acc (as kAddIndexInDim). f32.
//   -- traced indices (the front-end's x[i], x.at[i], jax.lax.dynamic_slice_in_dim, %) --
//   kRemainder     (a, b) same shape -> a mod b with the sign of b (jnp.remainder, Python's
//                    %): r = fmod(a, b), plus b when r != 0 and its sign differs from b's.
//                    Float, or every operand i32 (OpDef::integer) where a % 0 = 0 as JAX's
//                    (the divisor 0 is replaced by 1). VJP: da = dy, db = -dy floor(a / b)
//   kDynamicSliceInDim (x, start i32 ()) [dim, size] -> x[s : s + size] along dim,
//                    s = dynamic_slice_start(start, x.dim, size) below: a negative start
//                    counts from the end (once), then s is clamped into [0, x.dim - size], as
//                    jax.lax.dynamic_slice_in_dim (XLA's DynamicSlice). Any dtype
//   kDynamicUpdateSliceInDim (x, update, start i32 ()) [dim, add] -> x with rows [s, s +
//                    update.dim) along dim replaced by update (jax.lax.dynamic_update_slice_in_dim)
//                    or, with add, incremented by it; s as kDynamicSliceInDim's. Any dtype
//                    (add: f32, bf16 or i32)
//   vmap (any op, attrs.vmap = S > 0): jax.vmap over a leading dim of size S that every
//                    input and output carries: out[s] = op(in_0[s], in_1[s], ...), the
//                    other attributes describing the per-slice op. The partitioner maps
//                    the leading dim onto the `stage` axis (spmd_axis_name="stage") and
//                    emits the plain op on each device's slice.
//   -- mixture of experts (engine/model/moe.cpp; MaxText's layers/moe.py dense_matmul) --
//   kMoeRoute      (logits f32 or bf16 (B,S,E)) [k=size, capacity=start C, score_func=dim (0
//                    none, 1 softmax, 2 sigmoid), deepseek_weights=dim2, norm_topk_prob=inverse,
//                    routed_scaling_factor=scale, lb_scale=eps] -> combine (B,S,E,C) in the
//                    logits' dtype, lb f32 (), load f32 (2,E); the math in f32 either way. Per token: s = score_func(logits); the k
//                    largest s (ties: lower expert first, as jax.lax.top_k) in rank order;
//                    weights w = softmax over those k values (MaxText's non-deepseek blocks),
//                    or with deepseek_weights w = s (divided by their sum for sigmoid) times
//                    routed_scaling_factor; norm_topk_prob divides w by its sum. Capacity:
//                    each row b walks (s, rank) in order and counts per expert; the j-th
//                    arrival at expert e takes slot j - 1 when j <= C, else is dropped:
//                    combine[b,s,e,slot] = w (MaxText's combine_mask; every other entry 0).
//                    lb = lb_scale * sum_{b,e} count[b,e] * sum_s softmax(s)[b,s,e], count =
//                    top-k choices before dropping (MaxText's load_balance_loss with lb_scale
//                    = E * weight / (B * S^2)). load[0,e] = choices of e, load[1,e] = those
//                    dropped. lb and load are sums over b (partial when b is split).
//                    With a second input bias (E) f32 (routed_bias): the choice (top-k) and
//                    softmax for lb read g = s + bias, the weights s (MaxText's deepseek3
//                    pre_bias_logits: the bias picks experts, never weighs them).
//   kMoeRouteGrad  (logits, dcombine (B,S,E,C)[, bias]) [as kMoeRoute; lb_scale = lb_scale *
//                    dlb; bias_grad=raw] -> dlogits (B,S,E): the VJP of combine and lb (load
//                    has none); with bias_grad dbias (E) instead: lb's part summed over b, s
//   kMoeDispatch   (combine (B,S,E,C), x (B,S,M)) [mask=raw] -> (E,B,C,M): out[e,b,c,:] =
//                    sum_s g(combine[b,s,e,c]) x[b,s,:], g = (v != 0) with mask (MaxText's
//                    dispatch einsum BSM,BSEC->EBCM over dispatch_mask), else g = v
//   kMoeCombine    (combine (B,S,E,C), y (E,B,C,M)) [mask=raw] -> (B,S,M): out[b,s,:] =
//                    sum_{e,c} g(combine[b,s,e,c]) y[e,b,c,:] (EBCM,BSEC->BSM)
//   kMoeCombineWeightsGrad (dout (B,S,M), y (E,B,C,M)) -> (B,S,E,C): out[b,s,e,c] =
//                    sum_m dout[b,s,m] y[e,b,c,m] (the combine weights' cotangent; bf16 when
//                    both inputs are)
//   kExpertMatmul  (a (G,...,K), w (G,K,N)) [trans_b: w is (G,N,K)] -> (G,...,N): one GEMM
//                    per expert g (EBCM,EMH->EBCH)
//   kExpertMatmulGrad (a (G,...,K), dy (G,...,N)) -> dw (G,K,N) = per g a^T dy (bf16 when
//                    both inputs are, as matmul's)
//                    The MoE ops on bf16 (program.h kBf16Kernels) compute in f32 from the bf16
//                    values and round each bf16 output once (docs/precision.md)
//   -- dropless mixture of experts (MaxText's layers/moe.py sparse_matmul: permute, ragged_dot,
//      unpermute; engine/model/moe.cpp). N = S * k choices per row b; each row b (a sequence)
//      sorts its own choices (MaxText sorts each device's local tokens: per token the same) --
//   kMoeTopK       (logits (B,S,E)[, bias (E) f32]) [k=size, score_func=dim, deepseek_weights=
//                    dim2, norm_topk_prob=inverse, routed_scaling_factor=scale, lb_scale=eps]
//                    -> weights (B,S,k) in the logits' dtype, order i32 (B,N), rank i32 (B,N),
//                    group_sizes i32 (B,E), lb f32 (), load f32 (2,E). The choice, weights, lb
//                    and load as kMoeRoute's with no capacity (load[1] = 0: nothing dropped);
//                    choice i = s*k + r is token s's r-th expert; order = the stable argsort of
//                    the N choices by expert (MaxText's argsort(ravel(selected_experts))),
//                    rank its inverse (argsort(order)), group_sizes[b,e] = choices of e
//                    (jnp.bincount)
//   kMoeTopKGrad   (logits, dweights (B,S,k)[, bias]) [as kMoeTopK; lb_scale = lb_scale * dlb;
//                    bias_grad=raw] -> dlogits (B,S,E) (or dbias (E): lb's part) as kMoeRouteGrad
//   kMoePermute    (x, order i32 (B,N), rank i32 (B,N)[, weights (B,S,k)]) [k=size, inverse]
//                    order and rank inverse permutations of [0, N) per row (kMoeTopK's):
//                    forward (MaxText's permute: jnp.repeat by k, sort by order):
//                      x (B,S,M) -> (B,N,M): out[b,j] = w[b, order[b,j]] x[b, order[b,j] / k]
//                    inverse (MaxText's unpermute: unsort by argsort(order), weighted sum over k):
//                      x (B,N,M) -> (B,S,M): out[b,s] = sum_{r<k} w[b,s,r] x[b, rank[b,s*k+r]]
//                    (w = 1 without weights; the sum over r in order). Each is the other's
//                    transpose; an index outside [0, N) reads zeros
//   kMoePermuteWeightsGrad (a (B,S,M), y (B,N,M), order, rank) [k=size] -> (B,S,k):
//                    out[b,s,r] = <a[b,s], y[b, rank[b,s*k+r]]> (the weights' cotangent of
//                    either direction)
//   kRaggedDot     (lhs ([B,]N,K), rhs (E,K,P) [trans_b: (E,P,K)], group_sizes i32 ([B,]E))
//                    -> ([B,]N,P): jax.lax.ragged_dot per row b: lhs rows [o_e, o_e + g_e) times
//                    rhs[e], o_e = sum_{e'<e} g_e'; rows past sum(g) are zeros. Groups that
//                    overrun N are cut at N (negative sizes count as 0)
//   kRaggedDotGrad (lhs ([B,]N,K), dout ([B,]N,P), group_sizes) -> drhs (E,K,P): per group
//                    lhs_e^T dout_e, summed over b
//   kRaggedAllToAll (x ([L..,]G,N,F), input_offsets i32 ([L..,]G,G), send_sizes i32,
//                    output_offsets i32) [buffer=size R, axes=mesh_axes] -> ([L..,]G,R,F):
//                    jax.lax.ragged_all_to_all over the G members of dim -3 (shard_map's view:
//                    a leading dim of members), each l independent: member s sends rows
//                    [input_offsets[l,s,r], + send_sizes[l,s,r]) of x[l,s] to member r, which
//                    places them at output_offsets[l,s,r] in its R-row buffer out[l,r]
//                    (JAX's recv_sizes are the senders' send_sizes). Rows nobody writes are
//                    zeros; a row whose source is outside [0, N) or destination outside
//                    [0, R) is not sent (negative sizes send nothing); rows two senders
//                    write are summed in sender order, so the op is linear and its
//                    transpose (the VJP) is the reverse ragged_all_to_all: offsets and sizes
//                    with their last two dims swapped, input and output offsets exchanged,
//                    buffer N. Any dtype (data movement). In a per-device program dim -3
//                    holds this device's block of G / |axes| members and `axes` the mesh
//                    axes that split it (member j of rank q is global member q * G/|axes| +
//                    j); the runtime runs it across the group (collectives.h). Empty axes:
//                    every member on this device, no traffic.
//   kMoeEpDispatch (x (B,N,F), group_sizes i32 (B,E)) [k=size, ragged_buffer_factor=scale,
//                    exp=logical] -> x: the identity on values (the rows sorted per row b by
//                    expert, moe_permute's output), marking where MaxText's sparse_matmul sends
//                    them to the devices that own their experts. kMoeEpReturn (y (B,N,F),
//                    group_sizes) [as dispatch] -> y: the identity, where the rows come back.
//                    Each is the other's VJP. With the experts split (the logical name `exp`
//                    resolving to mesh axes of size > 1) the partitioner lowers them to
//                    MaxText's expert parallelism (docs/sharding.md "Dropless dispatch"): each
//                    device's rows sorted by expert (moe_permute), moe_ep_plan, a
//                    ragged_all_to_all into a receive buffer of R rows (R = local rows x
//                    ragged_buffer_factor when > 0, else x min(|exp|, E / k): MaxText's
//                    get_ragged_buffer_size), a local permute by local expert; the values in
//                    between (ragged_dot, swiglu and their gradients) live in that buffer; the
//                    return reverses it. Rows past a buffer that overflows
//                    (ragged_buffer_factor > 0) are dropped (their outputs zeros), as MaxText's.
//   kMoeEpPlan     (counts i32 (G,Bl,E), shard i32 ()) [buffer=size R, rows=start N]
//                    per-device only: the index arithmetic of one device of rank `shard` in an
//                    expert group of G (counts: every member's group sizes, per row b of its
//                    Bl rows, each row's N choices sorted by expert; experts [r E/G, (r+1) E/G)
//                    on member r) -> send_order, send_rank i32 (1,Bl*N): this device's rows
//                    sorted by (expert, b) and back; input_offsets, send_sizes, output_offsets
//                    i32 (1,G) for the dispatch and the same three for the return (i32 (1,G)
//                    each: the receivers' view); local_order, local_rank i32 (1,R): the
//                    received rows sorted by (local expert, sender), then the unused buffer
//                    rows; local_group_sizes i32 (E/G): rows per local expert inside the buffer
//   -- backward --
//   kEmbedLookupGrad (ids, dy (B,T,E)) [depth=V] -> dtable (V,E)
//   kRmsNormGrad   (x, scale, rstd, dy) -> dx, dscale
//   kAttentionGrad (q, k, v, o, lse, do[, segment_ids]) [scale] -> dq, dk, dv
//   kSwigluGrad    (g, u, dy) -> dg, du
//   kLayerNormGrad (x, scale, mean, rstd, dy) -> dx, dscale, dbias: with xhat = (x - mean) rstd
//                    and g = dy (1 + scale): dx = rstd (g - mean_e(g) - xhat mean_e(g xhat)),
//                    dscale = sum_rows dy xhat, dbias = sum_rows dy (rows summed in order)
//   kBiasAddGrad   (dy (...,F...)) [dim = rank of F...] -> dbias (F...): dy summed over its
//                    leading dims, rows in order
//   kRepeatKvGrad  (dy (B,T,H,D)) [size=R] -> dx (B,T,H/R,D): the transpose of kRepeatKv,
//                    dx[b,t,j,d] = sum_{r<R} dy[b,t,j*R + r,d] (summed in r order), f32
//   kSoftmaxCrossEntropyGrad (logits, targets, lse, dxent) -> dlogits
//   kMaskedMeanLossGrad (segmentation, total_weights[, dloss]) [scale] -> dxent
//                    dxent = scale * dloss * (seg != 0) / (total_weights + 1e-8); without the
//                    dloss input, dloss = 1: this is how autodiff seeds d(loss)/d(loss) = 1
//                    (there is no constant op). scale (default 1) folds in constant factors
//                    applied to the loss after it, e.g. loss' = scale(loss, 0.5).
//   -- optimizer and metrics (scalars are rank 0, f32 unless said) --
//   kSumSquares    (x) -> () sum of squares
//   kGlobalNorm    (s0, s1, ...) -> () sqrt(sum of inputs)
//   kClipFactor    (norm) [clip_threshold] -> () optax clip_by_global_norm factor
//   kLearningRate  (step i32 ()) [learning_rate, warmup_steps, cos_steps, final_fraction] -> ()
//   kAdamW         (param, grad, mu, nu, lr, clip_factor, step i32) [b1, b2, eps, weight_decay]
//                    -> param', mu', nu'   (in place: outputs alias param, mu, nu)
//   kIncrement     (step i32 ()) -> step + 1 (in place)
//   -- per-device only (the SPMD partitioner emits these; shapes are LOCAL) --
//   A collective runs over groups: the devices that share every mesh coordinate except
//   those of its `mesh_axes`; within a group (group_size = product of those axes' sizes),
//   members are ranked by their coordinates along mesh_axes, listed major to minor.
//   kAllGather     (x) [dim, mesh_axes] -> x with dim * G: the members' blocks concatenated
//                    along dim in rank order
//   kReduceScatter (x) [dim, mesh_axes] -> x with dim / G: member r gets block r (along dim)
//                    of the sum over members (summed in rank order: deterministic)
//   kAllReduce     (x) [mesh_axes, reduce_max] -> sum (or max) over members, in rank order
//   kAllToAll      (x) [split_dim=dim, concat_dim=dim2, mesh_axes] -> dim / G, dim2 * G:
//                    member m's chunk r along dim goes to member r, which concatenates the
//                    chunks it receives along dim2 in sender rank order
//   kCollectivePermute (x) [mesh_axes, shift, fill_zero, source_start, source_size] ->
//                    member r's x goes to member (r + shift) mod G; with fill_zero (jax
//                    ppermute with a partial permutation) only to r + shift inside [0, G),
//                    and, with fill_zero and source_size > 0, only from the members
//                    [source_start, source_start + source_size) (the partitioner's shift,
//                    slice and pad rules; a cyclic permute ignores them); members nobody
//                    sends to receive zeros
//   kDynamicSlice  (x) [dim, mesh_axes] -> x with dim / G: member r keeps block r (no traffic)
//   kSafeDivide    (a (), b ()) -> a / (b + 1e-8)   (finishes a masked mean from global sums)
//   kMaskedMeanLoss with attr unnormalized: loss output = sum(xent * (seg != 0)) (no division)
//   -- vocab-parallel (per-device; docs/sharding.md "Op rules") --
//   kAxisIndex     () [mesh_axes, size] -> i32 () = size * (this device's rank along
//                    mesh_axes, major to minor, as collectives rank members): jax.lax.axis_index
//                    times a block size, i.e. the first global index of the device's block.
//                    The executor computes it from the device's mesh coordinates.
//   kEmbedLookup   (table (Vb,E), ids, offset i32 ()) -> (B,T,E): the 3-input form looks up a
//                    vocab block [offset, offset + Vb): out[n] = table[ids[n] - offset] when
//                    that is in [0, Vb), zeros otherwise (summing over blocks gives the gather)
//   kEmbedLookupGrad (ids, dy, offset i32 ()) [depth=Vb] -> dtable (Vb,E): only ids inside
//                    the block contribute, to row ids[n] - offset
//   kSoftmaxCrossEntropyGrad (logits (N..,Vb), targets, lse, dxent, offset i32 ()) -> dlogits:
//                    the 5-input form: block columns v are global v + offset; lse is the
//                    GLOBAL logsumexp, so dlogits is exactly the global result's block
//   kVocabMax      (logits (...,Vb)) -> (...) max over the last dim (all-reduced with max)
//   kVocabStats    (logits (...,Vb), max (...), targets i32 (...), offset i32 ())
//                    -> sumexp (...), picked (...): sumexp = sum_v exp(logits - max) (1 where
//                    max is +-inf, so that lse = max as in the fused kernel); picked =
//                    logits[targets - offset] when that is in [0, Vb), else 0 (both partial)
//   kXentFromStats (max, sumexp, picked) -> xent, lse: lse = max + log(sumexp),
//                    xent = lse - picked (the global values once max/sumexp/picked are reduced)
//   -- host offload (engine/ir/remat.h: a remat policy's offloaded names) --
//   kMoveToHost    (x) -> x, held in the host's memory (jax's memory_kind "pinned_host"; XLA's
//                    MoveToHost annotation): the value is copied out of device memory after
//                    its producer, so the device buffer ends at its last forward reader
//   kMoveToDevice  (x) -> x, back in device memory (XLA's MoveToDevice), emitted before the
//                    first backward reader. Both are identities on the values (any dtype);
//                    compile() plans a kMoveToHost output in the host arena
//                    (MemoryAnalysis::host_temp_bytes, not the device peak) and predict.h
//                    times both on the chip's host link (PCIe), overlapped with compute.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "engine/sharding/logical_axes.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/shape.h"

namespace eng {

// The op list (XLA's hlo_opcode.h style): X(Name, "printed name", class). OpKind::kName
// follows list order, which the serialized form stores: append new ops at the end.
#define ENG_OPS(X)                                                  \
  X(EmbedLookup, "embed_lookup", kCustom)                           \
  X(OneHot, "one_hot", kCustom)                                     \
  X(Matmul, "matmul", kCustom)                                      \
  X(RmsNorm, "rmsnorm", kCustom)                                    \
  X(Rope, "rope", kCustom)                                          \
  X(Attention, "attention", kCustom)                                \
  X(Swiglu, "swiglu", kCustom)                                      \
  X(Add, "add", kCustom)                                            \
  X(Mul, "mul", kCustom)                                            \
  X(Scale, "scale", kCustom)                                        \
  X(Convert, "convert", kCustom)                                    \
  X(Constraint, "sharding_constraint", kCustom)                     \
  X(SoftmaxCrossEntropy, "softmax_cross_entropy", kCustom)          \
  X(MaskedMeanLoss, "masked_mean_loss", kCustom)                    \
  X(EmbedLookupGrad, "embed_lookup_grad", kCustom)                  \
  X(RmsNormGrad, "rmsnorm_grad", kCustom)                           \
  X(AttentionGrad, "attention_grad", kCustom)                       \
  X(SwigluGrad, "swiglu_grad", kCustom)                             \
  X(SoftmaxCrossEntropyGrad, "softmax_cross_entropy_grad", kCustom) \
  X(MaskedMeanLossGrad, "masked_mean_loss_grad", kCustom)           \
  X(SumSquares, "sum_squares", kCustom)                             \
  X(GlobalNorm, "global_norm", kCustom)                             \
  X(ClipFactor, "clip_factor", kCustom)                             \
  X(LearningRate, "learning_rate", kCustom)                         \
  X(AdamW, "adamw", kCustom)                                        \
  X(Increment, "increment", kCustom)                                \
  X(AllGather, "all_gather", kCustom)                               \
  X(ReduceScatter, "reduce_scatter", kCustom)                       \
  X(AllReduce, "all_reduce", kCustom)                               \
  X(AllToAll, "all_to_all", kCustom)                                \
  X(CollectivePermute, "collective_permute", kCustom)               \
  X(DynamicSlice, "dynamic_slice", kCustom)                         \
  X(SafeDivide, "safe_divide", kCustom)                             \
  X(Reshape, "reshape", kCustom)                                    \
  X(Slice, "slice", kCustom)                                        \
  X(Pad, "pad", kCustom)                                            \
  X(Concat, "concatenate", kCustom)                                 \
  X(Shift, "shift", kCustom)                                        \
  X(AxisIndex, "axis_index", kCustom)                               \
  X(VocabMax, "vocab_max", kCustom)                                 \
  X(VocabStats, "vocab_stats", kCustom)                             \
  X(XentFromStats, "xent_from_stats", kCustom)                      \
  X(RepeatKv, "repeat_kv", kCustom)                                 \
  X(RepeatKvGrad, "repeat_kv_grad", kCustom)                        \
  X(Gelu, "gelu", kUnary)                                           \
  X(GeluGrad, "gelu_grad", kUnaryGrad)                              \
  X(IndexInDim, "index_in_dim", kCustom)                            \
  X(AddIndexInDim, "add_index_in_dim", kCustom)                     \
  X(Exp, "exp", kUnary)                                             \
  X(ExpGrad, "exp_grad", kUnaryGrad)                                \
  X(Log, "log", kUnary)                                             \
  X(LogGrad, "log_grad", kUnaryGrad)                                \
  X(Tanh, "tanh", kUnary)                                           \
  X(TanhGrad, "tanh_grad", kUnaryGrad)                              \
  X(Reciprocal, "reciprocal", kUnary)                               \
  X(ReciprocalGrad, "reciprocal_grad", kUnaryGrad)                  \
  X(Transpose, "transpose", kCustom)                                \
  X(Compare, "compare", kCustom)                                    \
  X(Select, "select", kCustom)                                      \
  X(IndexPerRow, "index_per_row", kCustom)                          \
  X(AddIndexPerRow, "add_index_per_row", kCustom)                   \
  X(MoeRoute, "moe_route", kCustom)                                 \
  X(MoeRouteGrad, "moe_route_grad", kCustom)                        \
  X(MoeDispatch, "moe_dispatch", kCustom)                           \
  X(MoeCombine, "moe_combine", kCustom)                             \
  X(MoeCombineWeightsGrad, "moe_combine_weights_grad", kCustom)     \
  X(ExpertMatmul, "expert_matmul", kCustom)                         \
  X(ExpertMatmulGrad, "expert_matmul_grad", kCustom)         \
  X(Sqrt, "sqrt", kUnary)                                           \
  X(SqrtGrad, "sqrt_grad", kUnaryGrad)                              \
  X(Abs, "abs", kUnary)                                             \
  X(AbsGrad, "abs_grad", kUnaryGrad)                                \
  X(Sign, "sign", kUnary)                                           \
  X(SignGrad, "sign_grad", kUnaryGrad)                              \
  X(Sin, "sin", kUnary)                                             \
  X(SinGrad, "sin_grad", kUnaryGrad)                                \
  X(Cos, "cos", kUnary)                                             \
  X(CosGrad, "cos_grad", kUnaryGrad)                                \
  X(Floor, "floor", kUnary)                                         \
  X(FloorGrad, "floor_grad", kUnaryGrad)                            \
  X(Log1p, "log1p", kUnary)                                         \
  X(Log1pGrad, "log1p_grad", kUnaryGrad)                            \
  X(Expm1, "expm1", kUnary)                                         \
  X(Expm1Grad, "expm1_grad", kUnaryGrad)                            \
  X(LayerNorm, "layernorm", kCustom)                                \
  X(LayerNormGrad, "layernorm_grad", kCustom)                       \
  X(BiasAdd, "bias_add", kCustom)                                   \
  X(BiasAddGrad, "bias_add_grad", kCustom)                          \
  X(MoveToHost, "move_to_host", kCustom)                            \
  X(MoveToDevice, "move_to_device", kCustom)                        \
  X(MoeTopK, "moe_top_k", kCustom)                                  \
  X(MoeTopKGrad, "moe_top_k_grad", kCustom)                         \
  X(MoePermute, "moe_permute", kCustom)                             \
  X(MoePermuteWeightsGrad, "moe_permute_weights_grad", kCustom)     \
  X(RaggedDot, "ragged_dot", kCustom)                               \
  X(RaggedDotGrad, "ragged_dot_grad", kCustom)                     \
  X(RaggedAllToAll, "ragged_all_to_all", kCustom)                   \
  X(MoeEpDispatch, "moe_ep_dispatch", kCustom)                       \
  X(MoeEpReturn, "moe_ep_return", kCustom)                           \
  X(MoeEpPlan, "moe_ep_plan", kCustom)                             \
  X(Remainder, "remainder", kCustom)                                \
  X(DynamicSliceInDim, "dynamic_slice_in_dim", kCustom)             \
  X(DynamicUpdateSliceInDim, "dynamic_update_slice_in_dim", kCustom)

// kCustom ops have hand-written entries in every layer's table; kUnary ops (y = f(x)
// elementwise) and their kUnaryGrad partners (dx = dy * f'(x)) are defined by one row of
// engine/ir/op.cpp's unary table, and every other layer derives their entries from it.
enum class OpClass : uint8_t { kCustom, kUnary, kUnaryGrad };

enum class OpKind : uint8_t {
#define ENG_OP_ENUM(Name, printed, cls) k##Name,
  ENG_OPS(ENG_OP_ENUM)
#undef ENG_OP_ENUM
};

#define ENG_OP_COUNT(Name, printed, cls) +1
inline constexpr int kNumOps = 0 ENG_OPS(ENG_OP_COUNT);
// kTranspose's largest rank (the kernel keeps its index on the stack: a step allocates nothing).
inline constexpr int kMaxTransposeRank = 16;
#undef ENG_OP_COUNT

constexpr int op_index(OpKind kind) { return static_cast<int>(kind); }

constexpr OpClass op_class(OpKind kind) {
  constexpr OpClass kClasses[] = {
#define ENG_OP_CLASS(Name, printed, cls) OpClass::cls,
      ENG_OPS(ENG_OP_CLASS)
#undef ENG_OP_CLASS
  };
  return kClasses[op_index(kind)];
}

std::string_view op_name(OpKind kind);  // "embed_lookup", "matmul", ... (jaxpr-style)

// kCompare's direction attribute (stored in OpAttrs::dim).
enum class CompareDirection : int { kEq, kNe, kLt, kLe, kGt, kGe };

// Attributes: one struct for every op (not a std::variant of per-op structs: less churn);
// each op reads only the fields its schema (OpDef::attrs, op.cpp) names, plus the hidden
// ones noted below. Printing walks the schema; hashing and serialization walk every field.
struct OpAttrs {
  int a_split = 0, b_split = 0;       // kMatmul
  bool trans_a = false, trans_b = false;
  int64_t depth = 0;                  // kOneHot, kEmbedLookupGrad: vocab size
  double eps = 0.0;                   // kRmsNorm; kAdamW epsilon
  double scale = 1.0;                 // kScale, kAttention, kAttentionGrad, kMaskedMeanLossGrad
  double min_timescale = 1.0, max_timescale = 10000.0;  // kRope
  bool inverse = false;               // kRope: transpose rotation
  // kRope: MaxText's LLaMARotaryEmbedding (rope_form.h): adjacent pairs; Llama 3.1 scaling.
  bool rope_interleave = false, rope_use_scale = false;
  DType dtype = DType::kF32;          // kConvert
  LogicalAxes logical;                // kConstraint: logical axis per dim (nullopt = None)
  // kConstraint: true = flax nn.with_logical_constraint (size-1 axes kept; an equality
  // assert in explicit mode); false = MaxText maybe_shard_with_logical (size-1 axes
  // dropped; a reshard in both modes).
  bool raw = false;
  // kMatmul, kPad: MaxText/JAX out_sharding (logical names per output dim; empty = none), and
  // out_like: the value whose sharding the result should have (autodiff sets it to the
  // primal operand for the transposed matmuls). Both only settle otherwise ambiguous
  // shardings; neither is printed (the global program's semantics do not depend on them).
  LogicalAxes out_logical;
  int32_t out_like = -1;
  bool unnormalized = false;          // kMaskedMeanLoss (per-device): output the masked sum
  // Collectives (per-device programs).
  int dim = 0, dim2 = 0;
  std::vector<std::string> mesh_axes; // major to minor
  int64_t group_size = 1;             // product of mesh_axes' sizes
  int64_t shift = 0;                  // kCollectivePermute, kShift
  bool fill_zero = false;             // kCollectivePermute
  int64_t start = 0, size = 0;        // kSlice, kPad (dim as well); kAxisIndex: block size;
                                      // kRepeatKv, kRepeatKvGrad: repeats R; kShift,
                                      // kCollectivePermute: source rows (size 0: all)
  std::vector<int64_t> new_shape;     // kReshape
  int64_t vmap = 0;                   // any op: vmapped over a leading dim of this size
  bool reduce_max = false;            // kAllReduce: max instead of sum
  double clip_threshold = 0.0;        // kClipFactor
  double learning_rate = 0.0;         // kLearningRate
  int64_t warmup_steps = 0, cos_steps = 0;
  double final_fraction = 0.0;
  double b1 = 0.9, b2 = 0.95, weight_decay = 0.0;  // kAdamW

  bool operator==(const OpAttrs&) const = default;
};

// kMatmul's dimension numbers, named after XLA's DotDimensionNumbers, derived from a_split,
// b_split and trans_a/b (which stay the stored and printed form). There are no batch dims: the
// op is one GEMM over flattened dims. Dim ranges are [begin, end) into a's (b's) shape.
struct DotDims {
  int a_contracting_begin, a_contracting_end, a_free_begin, a_free_end;
  int b_contracting_begin, b_contracting_end, b_free_begin, b_free_end;
  int64_t M, N, K;   // out (M, N) = A (M, K) . B (K, N)
  int64_t lda, ldb;  // row lengths of a's and b's row-major 2D views (before any transpose)
};
// Requires 0 < a_split < rank(a) and 0 < b_split < rank(b) (shape inference checks it).
DotDims dot_dims(const OpAttrs& at, const Shape& a, const Shape& b);

// kShift / kCollectivePermute with fill_zero over n rows (members): the source rows [lo, hi)
// that land inside [0, n) and lie in the op's source rows (all when source_size is 0); row
// src goes to src + shift. Empty when hi <= lo.
struct ShiftRows {
  int64_t lo, hi;
};
inline ShiftRows shift_source_rows(const OpAttrs& at, int64_t n) {
  int64_t lo = std::max<int64_t>(0, -at.shift), hi = std::min(n, n - at.shift);
  if (at.size > 0) {
    lo = std::max(lo, at.start);
    hi = std::min(hi, at.start + at.size);
  }
  return {lo, hi};
}
// The rank whose x the member of rank r receives in a kCollectivePermute over G members:
// r - shift (mod G); with fill_zero no wrap-around and only the source rows, -1 (zeros)
// otherwise.
inline int64_t permute_source(const OpAttrs& a, int64_t G, int64_t r) {
  if (a.fill_zero) {
    const ShiftRows s = shift_source_rows(a, G);
    return r - a.shift >= s.lo && r - a.shift < s.hi ? r - a.shift : -1;
  }
  return ((r - a.shift) % G + G) % G;
}

// kDynamicSliceInDim / kDynamicUpdateSliceInDim: the first row of a window of `size` rows
// of a dim of n rows asked to start at `start` (JAX's: negative counts from the end once,
// then clamped so that the window fits).
inline int64_t dynamic_slice_start(int64_t start, int64_t n, int64_t size) {
  if (start < 0) start += n;
  return std::clamp<int64_t>(start, 0, std::max<int64_t>(n - size, 0));
}
// kRemainder's value (op.h above): the sign of the divisor. An int32 divisor of 0 gives 0
// (JAX's), and of -1 gives 0 (INT32_MIN % -1 overflows in C++).
inline int32_t remainder_i32(int32_t a, int32_t b) {
  if (b == 0 || b == -1) return 0;
  const int32_t r = a % b;
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}
template <typename T>
T remainder_float(T a, T b) {
  const T r = std::fmod(a, b);
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}

// ---- attribute schema: which OpAttrs fields an op reads, and how they print ----------
// One walker per op over its schema drives printing; hashing and serialization walk every
// stored field (kStoredAttrs in op.cpp), so the compile-cache key can never miss one.
using AttrMember =
    std::variant<std::monostate, int OpAttrs::*, int64_t OpAttrs::*, double OpAttrs::*,
                 bool OpAttrs::*, DType OpAttrs::*, std::vector<std::string> OpAttrs::*,
                 std::vector<int64_t> OpAttrs::*, LogicalAxes OpAttrs::*>;
enum class AttrPrint : uint8_t {
  kValue,          // name=value; lists print as (a,b)
  kFlag,           // a bool: its name when true, nothing when false
  kUnlessDefault,  // name=value unless the value is OpAttrs{}'s
  kLogical,        // logical names: (a, None)
  kLiteral,        // the name alone, always (no member): attention's "causal"
};
struct AttrField {
  std::string_view name;  // printed name (serialization: the member's name)
  AttrMember member;
  AttrPrint print = AttrPrint::kValue;
};

// ---- the ir/ table row of one op (op.cpp's kOpDefs) ----------------------------------------
struct OpDef {
  std::span<const AttrField> attrs;  // printed attributes, in print order
  // Ops that move or select data across devices: the runtime runs each as ONE instruction
  // over every device's buffers (engine/runtime/collectives.h), not per device.
  bool collective = false;
  uint32_t int_inputs = 0;  // bit i: input i is i32 (ids, positions, targets, step, offset)
  // Output o updates input in_place[o] in place (-1: a new buffer); kAdamW, kIncrement.
  std::array<int8_t, 3> in_place = {-1, -1, -1};
  // Also integer arithmetic: every operand i32 (jnp's int32 add, multiply, psum), wrapping as
  // two's complement does; no gradient (autodiff skips i32 values). kAdd, kMul, kScale (an
  // integral scale), kAllReduce, kReduceScatter.
  bool integer = false;
};
const OpDef& op_def(OpKind kind);

inline bool is_collective(OpKind kind) { return op_def(kind).collective; }
inline bool has_integer_kernel(OpKind kind) { return op_def(kind).integer; }
inline bool is_int_input(OpKind kind, size_t i) {
  return i < 32 && ((op_def(kind).int_inputs >> i) & 1u) != 0;
}
// The input that output o of an instruction of `kind` with n_inputs inputs updates in place,
// or -1. An in-place input may be optional (kAddIndexInDim's acc): an instruction without it
// has nothing to update, so that output starts a new buffer (its kernel fills it).
inline int in_place_input(OpKind kind, size_t o, size_t n_inputs) {
  const int k = o < 3 ? op_def(kind).in_place[o] : -1;
  return k < static_cast<int>(n_inputs) ? k : -1;
}

// Calls f(field, value, default_value) for each printed attribute of `kind` (vmap first):
// const references to the member in `a` and in OpAttrs{} (std::monostate for a literal).
template <class F>
void for_each_attr(OpKind kind, const OpAttrs& a, F&& f);

// Calls f(field, member&) for every stored OpAttrs field, in serialization order.
template <class A, class F>
void for_each_stored_attr(A& a, F&& f);

// "[eps=1e-05]", "[a_split=2 b_split=1]": the attributes kind uses, for the text dump.
std::string format_attrs(OpKind kind, const OpAttrs& attrs);
// Hashes every stored field (not just the printed ones: out_logical, out_like, group_size).
uint64_t hash_attrs(OpKind kind, const OpAttrs& attrs);

// ---- unary elementwise ops (OpClass::kUnary): the one row that defines each ------------------
struct UnaryMath {
  OpKind op, grad;           // y = f(x); its VJP op: dx = dy * df(x)
  double (*f)(double);       // forward, evaluated in double (kernel and reference alike)
  double (*df)(double);      // derivative
  double flops, grad_flops;  // per element, for compile/cost
};
// The row of a kUnary op or of its kUnaryGrad partner.
const UnaryMath& unary_math(OpKind kind);

namespace attr_detail {
extern const AttrField kVmapField;
extern const OpAttrs kDefaultAttrs;
std::span<const AttrField> stored_attrs();
}  // namespace attr_detail

template <class F>
void for_each_attr(OpKind kind, const OpAttrs& a, F&& f) {
  auto visit = [&](const AttrField& field) {
    std::visit(
        [&](auto m) {
          if constexpr (std::is_same_v<decltype(m), std::monostate>) {
            f(field, m, m);
          } else {
            f(field, a.*m, attr_detail::kDefaultAttrs.*m);
          }
        },
        field.member);
  };
  visit(attr_detail::kVmapField);
  for (const AttrField& field : op_def(kind).attrs) visit(field);
}

template <class A, class F>
void for_each_stored_attr(A& a, F&& f) {
  for (const AttrField& field : attr_detail::stored_attrs())
    std::visit(
        [&](auto m) {
          if constexpr (!std::is_same_v<decltype(m), std::monostate>) f(field, a.*m);
        },
        field.member);
}

}  // namespace eng

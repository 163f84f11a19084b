// engine/train/checkpoint_layout.cpp: restoring a checkpoint saved with the other
// decoder-layer layout (scan_layers true <-> false, pipelines' ([R,] S, lps, ...) stacks;
// checkpoint.h's checkpoint_tensor and checkpoint_pipeline_tensor).
#include <cstring>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "engine/base/check.h"
#include "engine/model/llama.h"
#include "engine/train/checkpoint.h"

namespace eng {

namespace {

Shape without_dim(const Shape& s, int dim) {
  std::vector<int64_t> d(s.dims().begin(), s.dims().end());
  d.erase(d.begin() + dim);
  return Shape(d);
}

// Row-major copy of slot l along `dim` of a stacked (outer, L, inner) array from/to a
// layer's (outer, inner) array.
void copy_slot(const char* from, char* to, const Shape& stacked, int dim, int64_t l,
               int64_t elem, bool into_stacked) {
  const int64_t outer = stacked.prod(0, dim), L = stacked[dim];
  const int64_t row = stacked.prod(dim + 1, stacked.rank()) * elem;
  for (int64_t o = 0; o < outer; ++o) {
    char* s = const_cast<char*>(into_stacked ? to : from) + (o * L + l) * row;
    if (into_stacked) std::memcpy(s, from + o * row, row);
    else std::memcpy(to + o * row, s, row);
  }
}

// The layer dim of the file's stacked entry e whose layers have shape `layer`.
Result<int> file_scan_axis(const CheckpointFile& f, const CheckpointFile::Entry& e,
                           const Shape& layer) {
  const Shape& s = e.spec.shape;
  std::vector<int> fits;
  for (int a = 0; a < s.rank(); ++a)
    if (without_dim(s, a) == layer) fits.push_back(a);
  auto it = f.metadata.find("param_scan_axis");
  if (it != f.metadata.end())
    for (int a : fits)
      if (fmt::format("{}", a) == it->second) return a;
  if (fits.size() == 1) return fits[0];
  return invalid_argument("restore: checkpoint '{}': stacked '{}' {} {} layers of shape {} "
                          "(no param_scan_axis metadata says which dim holds the layers)",
                          f.path, e.spec.name, s.to_string(),
                          fits.empty() ? "does not hold" : "ambiguously holds",
                          layer.to_string());
}

// A pipeline's stacked weight in the file, ([R,] S, lps, <layer>) (two or three leading dims:
// only pipelines write those; they are layer-major, l = r*S*lps + s*lps + j): its layer count,
// else 0.
int64_t pipeline_stack_layers(const CheckpointFile::Entry& e, const Shape& layer) {
  const Shape& s = e.spec.shape;
  const int lead = s.rank() - layer.rank();
  if (lead < 2 || lead > 3 || !(s.slice(lead, s.rank()) == layer)) return 0;
  return s.prod(0, lead);
}

constexpr std::string_view kStackedPart = "decoder/layers/";
constexpr std::string_view kOutsidePart = "decoder/layers_outside_pipeline/";

// ".../<from>..." -> ".../<to>...": a stack's name as the other stack (pipelines with
// pipeline_parallel_layers < L keep the layers after the pipeline in a layers_outside_pipeline
// stack beside their decoder/layers stack); nullopt for other names.
std::optional<std::string> swap_part(const std::string& name, std::string_view from,
                                     std::string_view to) {
  const size_t at = name.find(from);
  if (at == std::string::npos) return std::nullopt;
  return name.substr(0, at) + std::string(to) + name.substr(at + from.size());
}

// Layer `held + k` of a file whose stack `stacked_name` holds only `held` layers (a pipeline
// with pipeline_parallel_layers = held): slot k of its layers_outside_pipeline stack, copied
// to `to`. Errors name the layer the file lacks.
Status read_outside_layer(const CheckpointFile& f, const CheckpointFile::Entry& stack,
                          int64_t held, int64_t k, DType dtype, const Shape& layer, char* to) {
  const std::optional<std::string> name = swap_part(stack.spec.name, kStackedPart, kOutsidePart);
  const CheckpointFile::Entry* e = name ? f.find(*name) : nullptr;
  if (e == nullptr || e->spec.dtype != dtype)
    return invalid_argument("restore: checkpoint '{}': '{}' {} has {} layers, the model wants "
                            "layer {}", f.path, stack.spec.name, stack.spec.shape.to_string(),
                            held, held + k);
  ENG_ASSIGN_OR_RETURN(int b, file_scan_axis(f, *e, layer));
  if (k >= e->spec.shape[b])
    return invalid_argument("restore: checkpoint '{}' holds {} + {} layers in '{}' and '{}', the "
                            "model wants layer {}", f.path, held, e->spec.shape[b],
                            stack.spec.name, e->spec.name, held + k);
  copy_slot(static_cast<const char*>(f.bytes(*e)), to, e->spec.shape, b, k, dtype_size(dtype),
            false);
  return ok_status();
}

// Layer l of a layer weight (shape `layer`) from the file: its layers_<l> tensor, or slot l
// of the stacked tensor (past the stack's layers: of the layers_outside_pipeline stack beside
// it). Appends the bytes to out.
Status read_layer(const CheckpointFile& f, const std::string& stacked_name, int64_t l,
                  DType dtype, const Shape& layer, std::vector<char>& out) {
  const std::string flat = *unscanned_name(stacked_name, l);
  const int64_t n = layer.numel() * dtype_size(dtype);
  const size_t at = out.size();
  out.resize(at + static_cast<size_t>(n));
  if (const CheckpointFile::Entry* e = f.find(flat)) {
    if (e->spec.dtype != dtype || !(e->spec.shape == layer))
      return invalid_argument("restore: '{}' in checkpoint '{}' is {}{} but the model expects {}{}",
                              flat, f.path, dtype_name(e->spec.dtype), e->spec.shape.to_string(),
                              dtype_name(dtype), layer.to_string());
    std::memcpy(out.data() + at, f.bytes(*e), static_cast<size_t>(n));
    return ok_status();
  }
  const CheckpointFile::Entry* e = f.find(stacked_name);
  if (e == nullptr || e->spec.dtype != dtype)
    return not_found("restore: checkpoint '{}' has no tensor '{}' (nor a stacked '{}'; saved "
                     "from another model config?)", f.path, flat, stacked_name);
  const int64_t piped = pipeline_stack_layers(*e, layer);  // layer-major when > 0
  int b = -1;
  if (piped == 0) {
    ENG_ASSIGN_OR_RETURN(b, file_scan_axis(f, *e, layer));
  }
  const int64_t held = piped > 0 ? piped : e->spec.shape[b];
  if (l >= held) return read_outside_layer(f, *e, held, l - held, dtype, layer, out.data() + at);
  if (piped > 0)
    std::memcpy(out.data() + at, static_cast<const char*>(f.bytes(*e)) + l * n,
                static_cast<size_t>(n));
  else
    copy_slot(static_cast<const char*>(f.bytes(*e)), out.data() + at, e->spec.shape, b, l,
              dtype_size(dtype), false);
  return ok_status();
}

// A stack (shape, its layer dim at `axis`) whose slot k is layer first_layer + k of the file's
// `stacked_name` (any layout: read_layer), assembled in scratch.
Result<const void*> restack_layers(const CheckpointFile& f, const std::string& stacked_name,
                                   int64_t first_layer, DType dtype, const Shape& shape, int axis,
                                   std::vector<char>& scratch) {
  const Shape layer = without_dim(shape, axis);
  std::vector<char> one;
  scratch.assign(static_cast<size_t>(shape.numel() * dtype_size(dtype)), 0);
  for (int64_t k = 0; k < shape[axis]; ++k) {
    one.clear();
    ENG_RETURN_IF_ERROR(read_layer(f, stacked_name, first_layer + k, dtype, layer, one));
    copy_slot(one.data(), scratch.data(), shape, axis, k, dtype_size(dtype), true);
  }
  return static_cast<const void*>(scratch.data());
}

// Whether the file's stacks keep their layer dim elsewhere than `axis` (its param_scan_axis
// metadata; a file without it: no).
bool other_scan_axis(const CheckpointFile& f, int axis) {
  const auto meta = f.metadata.find("param_scan_axis");
  return meta != f.metadata.end() && meta->second != fmt::format("{}", axis);
}

}  // namespace

Result<const void*> checkpoint_tensor(const CheckpointFile& f, const std::string& name,
                                      DType dtype, const Shape& shape, int64_t param_scan_axis,
                                      std::vector<char>& scratch) {
  const CheckpointFile::Entry* e = f.find(name);
  const int axis = static_cast<int>(param_scan_axis);
  // A stacked tensor saved with its layer dim elsewhere may still have the wanted shape
  // ((H, L, D, E) vs (L, H, D, E) when H == L): the file's param_scan_axis decides.
  const bool restack = axis >= 0 && unscanned_name(name, 0) && other_scan_axis(f, axis);
  if (e != nullptr && e->spec.dtype == dtype && e->spec.shape == shape && !restack)
    return f.bytes(*e);
  scratch.clear();
  if (std::optional<ScannedName> sn = scanned_name(name)) {  // unscanned model, layer sn->layer
    if (e == nullptr) {
      ENG_RETURN_IF_ERROR(read_layer(f, sn->name, sn->layer, dtype, shape, scratch));
      return static_cast<const void*>(scratch.data());
    }
  } else if (unscanned_name(name, 0) && axis >= 0 && axis < shape.rank()) {  // scanned model
    return restack_layers(f, name, 0, dtype, shape, axis, scratch);
  }
  if (e == nullptr)
    return not_found("restore: checkpoint '{}' has no tensor '{}' (saved from another model "
                     "config?)", f.path, name);
  return invalid_argument("restore: '{}' in checkpoint '{}' is {}{} but the model expects {}{}",
                          name, f.path, dtype_name(e->spec.dtype), e->spec.shape.to_string(),
                          dtype_name(dtype), shape.to_string());
}

Result<const void*> checkpoint_pipeline_tensor(const CheckpointFile& f, const std::string& name,
                                               DType dtype, const Shape& shape, int lead,
                                               std::vector<char>& scratch) {
  const CheckpointFile::Entry* e = f.find(name);
  if (e != nullptr && e->spec.dtype == dtype && e->spec.shape == shape) return f.bytes(*e);
  const Shape layer = shape.slice(lead, shape.rank());
  const int64_t L = shape.prod(0, lead);
  // Another pipeline shape's stack of the same layers holds the same bytes.
  if (e != nullptr && e->spec.dtype == dtype && pipeline_stack_layers(*e, layer) == L)
    return f.bytes(*e);
  // Else layer by layer: layers_<l> tensors, or slot l of a scanned stack (read_layer).
  scratch.clear();
  for (int64_t l = 0; l < L; ++l) ENG_RETURN_IF_ERROR(read_layer(f, name, l, dtype, layer, scratch));
  return static_cast<const void*>(scratch.data());
}

Result<const void*> checkpoint_outside_tensor(const CheckpointFile& f, const std::string& name,
                                              DType dtype, const Shape& shape,
                                              int64_t param_scan_axis, int64_t first_layer,
                                              std::vector<char>& scratch) {
  const CheckpointFile::Entry* e = f.find(name);
  const int axis = static_cast<int>(param_scan_axis);
  if (e != nullptr && e->spec.dtype == dtype && e->spec.shape == shape &&
      !other_scan_axis(f, axis))
    return f.bytes(*e);
  const std::optional<std::string> stacked = swap_part(name, kOutsidePart, kStackedPart);
  ENG_CHECK(stacked && axis >= 0 && axis < shape.rank(),
            "restore: '{}' {} is not a layers_outside_pipeline stack at dim {}", name,
            shape.to_string(), axis);
  // Layer by layer: layers_<l> tensors, a scanned stack, or another pipeline's stacks.
  return restack_layers(f, *stacked, first_layer, dtype, shape, axis, scratch);
}

}  // namespace eng

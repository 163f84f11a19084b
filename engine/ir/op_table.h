// engine/ir/op_table.h: what one layer knows about every op, as a table indexed by OpKind and
// checked complete at compile time (ggml's static_assert on GGML_OP_COUNT, made exact).
//
//   constexpr auto kCost = make_op_table<CostFn>({
//       {OpKind::kAdd, [](const Program& p, const Instr& in) { ... }},
//       ...},                             // one row per OpClass::kCustom op, in any order
//       unary_cost, unary_grad_cost);     // the entry every kUnary / kUnaryGrad op takes
//
// A kCustom op with no row, or an op with two rows, stops the build: the table is built by a
// consteval function, and reaching one of the two undefined-at-compile-time functions below
// is the error "call to non-'constexpr' function 'void eng::op_table_detail::
// an_OpKind_has_no_row_in_this_table()'", pointing at the table.
#pragma once

#include <array>
#include <cstddef>

#include "engine/ir/op.h"

namespace eng {

template <class T>
struct OpEntry {
  OpKind kind;
  T value;
};

template <class T>
using OpTable = std::array<T, kNumOps>;

namespace op_table_detail {
// Deliberately not constexpr: calling one during constant evaluation is a compile error.
void an_OpKind_has_no_row_in_this_table();
void an_OpKind_has_two_rows_in_this_table();
}  // namespace op_table_detail

// rows: the kCustom ops' entries (a kUnary/kUnaryGrad op may have its own row too); every
// other kUnary op takes `unary`, every other kUnaryGrad op `unary_grad`.
template <class T, size_t N>
consteval OpTable<T> make_op_table(const OpEntry<T> (&rows)[N], T unary, T unary_grad) {
  OpTable<T> table{};
  std::array<bool, kNumOps> seen{};
  for (const OpEntry<T>& row : rows) {
    const int i = op_index(row.kind);
    if (seen[i]) op_table_detail::an_OpKind_has_two_rows_in_this_table();
    seen[i] = true;
    table[i] = row.value;
  }
  for (int i = 0; i < kNumOps; ++i) {
    if (seen[i]) continue;
    switch (op_class(static_cast<OpKind>(i))) {
      case OpClass::kUnary:
        table[i] = unary;
        break;
      case OpClass::kUnaryGrad:
        table[i] = unary_grad;
        break;
      case OpClass::kCustom:
        op_table_detail::an_OpKind_has_no_row_in_this_table();
    }
  }
  return table;
}

}  // namespace eng

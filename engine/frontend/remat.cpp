// engine/frontend/remat.cpp: jax.remat with a policy inside a trace (remat.h).
#include "engine/frontend/remat.h"

#include <string>

namespace eng::frontend {

RematRegion remat_begin(Trace& tr) {
  RematRegion r{tr.builder().program().instrs().size(), tr.remat().open};
  tr.remat().open = tr.remat().regions++;
  tr.builder().set_remat_scope(tr.remat().open);
  return r;
}

Status remat_end(Trace& tr, const RematRegion& r, const std::vector<ValueId>& results,
                 const std::function<Result<bool>(std::string_view op)>& save) {
  tr.remat().open = r.outer;
  tr.builder().set_remat_scope(r.outer);
  Builder& b = tr.builder();
  const std::string name(kRematSavedName);
  for (size_t k = r.first_instr; k < b.program().instrs().size(); ++k) {
    const Instr in = b.program().instrs()[k];  // a copy: tagging touches the program
    bool keep = false;
    if (save) {
      ENG_ASSIGN_OR_RETURN(keep, save(op_name(in.kind)));
    }
    if (keep)
      for (ValueId o : in.outputs) b.checkpoint_name(o, name);
  }
  for (ValueId v : results)
    if (b.info(v).remat_scope >= 0) b.checkpoint_name(v, name);
  return ok_status();
}

RematPolicy remat_policy_of_regions() {
  RematPolicy p;
  p.name = "remat(policy)";
  p.save_names = {std::string(kRematSavedName)};
  return p;
}

}  // namespace eng::frontend

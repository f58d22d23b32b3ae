// The extension module braid_torch._C: the backend class, the creator
// function torch.distributed calls for backend "braid" (__init__.py
// registers it) and `c10d_base`, the name of the c10d class it extends
// ("ProcessGroup" on torch 1.x, "Backend" on 2.x).
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/python.h>

#include "process_group.h"

namespace py = pybind11;

namespace braid_torch {
namespace {

c10::intrusive_ptr<ProcessGroupBraid> create(const c10::intrusive_ptr<c10d::Store>& store,
                                          int rank, int size,
                                              std::chrono::milliseconds timeout) {
  // Building the communicator waits on the store for the other ranks.
  py::gil_scoped_release nogil;
  return c10::make_intrusive<ProcessGroupBraid>(store, rank, size, timeout);
}

}  // namespace
}  // namespace braid_torch

PYBIND11_MODULE(_C, m) {
  m.doc() = "braid as a torch.distributed backend (see braid_torch/__init__.py)";
  // The base class's Python type: torch._C._distributed_c10d.ProcessGroup on
  // torch 1.x, .Backend on 2.x (torch_api.h).
  py::module_::import("torch.distributed");
  py::object base = py::module_::import("torch._C._distributed_c10d").attr(braid_torch::kBackendBasePyName);
  m.attr("c10d_base") = braid_torch::kBackendBasePyName;
  py::class_<braid_torch::ProcessGroupBraid, c10::intrusive_ptr<braid_torch::ProcessGroupBraid>>(
      m, "ProcessGroupBraid", base)
      .def(py::init(&braid_torch::create), py::arg("store"), py::arg("rank"), py::arg("world_size"),
           py::arg("timeout"))
      .def("transport_to",
           [](braid_torch::ProcessGroupBraid& pg, int peer) {
             return pg.communicator().transport_to(peer);
           },
           py::arg("peer"), "How this rank reaches `peer`: 'self', 'shm' or 'tcp'.")
      .def("last_algorithm",
           [](braid_torch::ProcessGroupBraid& pg) { return pg.communicator().last_algorithm(); },
           "The braid algorithm that ran the newest completed operation.");
  m.def("create_process_group", &braid_torch::create, py::arg("store"), py::arg("rank"),
        py::arg("world_size"), py::arg("timeout"),
        "The creator torch.distributed.Backend.register_backend is given for 'braid'.");
}

// Included first by every .cu file. nvcc's front end warns (#554) that TensorView's
// const-conversion operator "will not be called" when it instantiates TensorView<const T>:
// true and intended (the operator is constrained away for const element types), so the
// warning is silenced for the rest of the translation unit.
#pragma once
#pragma nv_diag_suppress 554

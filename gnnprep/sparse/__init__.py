"""Stage 1, sparse kernels and CSR building: the fused sum/max SpMM and row gathers (numba, torch), the bounded-memory CSR builder, node-order algorithms."""

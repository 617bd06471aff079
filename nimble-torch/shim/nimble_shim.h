// The shim's C ABI: every function nimble-torch's `ffi` module calls, grouped by the file that
// defines it. Each `int` function returns 0 on success and -1 on failure, never lets a C++
// exception escape, and leaves the failure's message for ns_last_error(). Handles (`void*`) are
// objects the shim made with `new`, freed by their `_free` function; strings and arrays it hands
// out are malloc'd (ns_free_string, ns_free_array) and tensors are `new at::Tensor`s the caller
// adopts. Nothing here decides anything: plans come from Rust (nimble-sched), and the dependency
// analysis of a recorded trace is done in Rust.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// common.cpp: errors and memory
const char* ns_last_error();
void ns_free_string(char* s);
void ns_free_array(void** array);

// device.cpp: the device, its allocator, event timing, profiling, layouts
int ns_cuda_device_count(int* out);
int ns_cuda_synchronize();
int ns_set_device(int device);
int ns_cuda_allocated_bytes(int device, long long* out);
int ns_cuda_empty_cache();
int ns_set_conv_tf32(int allow);
int ns_conv_tf32(int* out);
// How nimble::linear computes on CUDA from now on: 0 the faster way by timing each new shape
// (the default), 1 ATen's linear, 2 the plain product and one epilogue kernel.
int ns_set_linear_gemm(int mode);
// How nimble::conv2d_relu computes on CUDA from now on: 0 the faster way by timing each new case
// (the default), 1 cuDNN's fused kernels, 2 the convolution and one epilogue kernel.
int ns_set_conv_relu(int mode);
int ns_timer_new(void** out);
void ns_timer_free(void* timer);
int ns_timer_start(void* timer);
int ns_timer_stop(void* timer, float* ms);
int ns_timer_end(void* timer);
int ns_timer_elapsed(void* timer, float* ms);
int ns_sm_limits(int device, long long* out);
int ns_profile_begin();
int ns_profile_end(const char* chrome_trace, char** out);
int ns_channels_last_copy(void* tensor, void** out);

// record.cpp: recording a forward's top-level ops
int ns_trace_begin(int keep_state);
int ns_trace_end(char** out, void*** params, int* n_params, void*** state, int* n_state);

// passes.cpp: schedules, scheduled passes, CUDA graphs
int ns_schedule_new(int n, const char* names, const int* stream_of, const int* wait_counts, const int* wait_list,
                    const unsigned char* record, int n_streams, int device, int timing, void** out);
void ns_schedule_free(void* schedule);
int ns_pass_begin(void* schedule, void* graph, int capture_mode, long long gate_cycles, int arm);
int ns_pass_end(void* schedule, void* graph, char** problem);
int ns_record_on_origin(void* schedule, void* const* tensors, int n);
int ns_pass_disarm(void* schedule, char** problem);
int ns_schedule_durations(void* schedule, float* out_us, int n);
int ns_schedule_node_ranges(void* schedule, int* out, int n);
int ns_graph_new(void** out);
void ns_graph_free(void* graph);
int ns_graph_instantiate(void* graph);
int ns_graph_replay(void* graph);
int ns_graph_raw(void* graph, void** out);

// jit.cpp: TorchScript modules
int ns_jit_trace_begin(void* const* inputs, int n, void** module);
int ns_jit_trace_end(void* module, void* const* outputs, int n);
void ns_jit_trace_abandon();
int ns_jit_load(const char* path, int device, void** out);
void ns_jit_free(void* module);
int ns_jit_save(void* module, const char* path);
int ns_jit_to(void* module, int dtype);
int ns_jit_optimize(void* module, int on_host, int fold_half, int fuse, int kernels, int channels_last, void** out, int* applied, int* fused);
int ns_jit_forward(void* module, void* const* inputs, int n, int train, void*** outputs, int* n_out, char** structure);
int ns_jit_bind(void* module, const char* name, void* value, int check_only);
int ns_jit_node_kinds(void* module, char** out);
int ns_jit_arguments(void* module, char** out);

// host_values.cpp: host-computed values copied to the device, folded into constants
int ns_jit_fold_host_values(void* module, void* const* inputs, int n, void** out, int* folded);

// training.cpp: backward, fused optimizer steps, the autograd function over captured graphs
int ns_grad_enabled(int* out);
int ns_backward(void* const* tensors, void* const* grads, int n, int retain, void* one_stream, void* const* wrt, int n_wrt,
                void*** out);
int ns_fresh_grad_accumulators(void* const* params, int n);
int ns_grads_reset(void* const* params, int n);
int ns_sgd_step(void* const* params, void* const* momentum_buffers, int n, double lr, double momentum, double dampening,
                double weight_decay, int nesterov);
int ns_adam_step(void* const* params, void* const* exp_avgs, void* const* exp_avg_sqs, void* const* steps, int n, double lr,
                 double beta1, double beta2, double eps, double weight_decay);
int ns_train_state_new(void* forward_graph, void* backward_graph, void* const* outputs, void* const* grad_outputs, int n_outputs,
                       void* const* params, void* const* param_grads, int n_params, void** out);
void ns_train_state_free(void* raw);
int ns_train_forward(void* raw, void*** outputs, int* n_out);

// comm.cpp: NCCL communicators, eager collectives, the data-parallel gradient reducer
int ns_nccl_version(int* out);
int ns_nccl_unique_id(unsigned char* out, int n);
int ns_comm_new(const unsigned char* id, int n, int world, int rank, int device, void** out);
void ns_comm_free(void* comm);
int ns_comm_broadcast(void* comm, void* const* tensors, int n, int root);
int ns_comm_all_gather_i64(void* comm, const long long* mine, int n, long long* all);
int ns_comm_all_reduce_mean(void* comm, void* const* tensors, int n);
int ns_reducer_new(void* comm, void* const* params, int n, const int* bucket_of, int n_buckets, int high_priority, long long pack_below,
                   void** out);
void ns_reducer_free(void* reducer);
int ns_reducer_arm(void* reducer);
int ns_reducer_finish(void* reducer);
int ns_reducer_wait(void* reducer, int bucket);

#ifdef __cplusplus
}  // extern "C"
#endif

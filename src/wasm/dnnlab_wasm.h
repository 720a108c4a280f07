/* dnnlab_wasm.h: the C API of the browser core (dnnlab_core.wasm).
 *
 * The nn core compiled to WebAssembly (SIMD128), driven through a handful of
 * extern "C" functions. Every function catches everything: failures come back
 * as a status code, with a message from dnnlab_last_error(); nothing aborts,
 * and the module stays usable after an error. Pointers are offsets into wasm
 * memory; src/wasm/dnnlab.mjs hides them behind a JS class.
 *
 *   dnnlab_model* m = dnnlab_model_create("{\"input\":[784],\"classes\":10,"
 *       "\"layers\":[{\"type\":\"dense\",\"units\":256},{\"type\":\"relu\"},"
 *       "{\"type\":\"dense\",\"units\":10}],\"optimizer\":{\"type\":\"sgd\",\"lr\":0.01}}");
 *   if (!m) puts(dnnlab_last_error());
 *   dnnlab_model_load_data(m, x, n * 784, y, n);   // copied: x and y may be freed
 *   double r[4];
 *   dnnlab_model_train_epochs(m, 1, r);            // r = loss, accuracy, seconds, samples/s
 *   dnnlab_model_evaluate(m, vx, vn * 784, vy, vn, r);  // r = loss, accuracy
 *   dnnlab_model_free(m);
 *
 * Training on a data shard (docs/protocol.md, "Data shards"), as browser
 * workers do: the splits are decoded once and shared, not copied, by models.
 *
 *   dnnlab_shard* s = dnnlab_shard_open(bytes, len);   // bytes may be freed after
 *   dnnlab_model_use_split(m, s, DNNLAB_SPLIT_TRAIN);
 *   double e[8];
 *   dnnlab_model_fit_epoch(m, s, e);   // train one epoch, evaluate s's val split
 *   dnnlab_model_evaluate_split(m, s, DNNLAB_SPLIT_TEST, r);
 *   dnnlab_shard_free(s);              // models using it keep its data alive
 *
 * A client of a distributed run (`dnnlab train --distributed --listen`,
 * docs/distributed.md "Browser clients"): the spec's `features` part on a
 * shard's training split, fed the server's binary frames one at a time. The
 * caller moves the bytes (a WebSocket); the core decodes, trains and encodes.
 *
 *   dnnlab_hybrid* h = dnnlab_hybrid_create(spec_json, s, welcome_fingerprint);
 *   on each binary frame:
 *     int32_t n;
 *     if (dnnlab_hybrid_frame(h, bytes, len, &n) != DNNLAB_OK) ... leave (the message says why)
 *     if (n) send(dnnlab_hybrid_reply(h), n);
 *   dnnlab_hybrid_info(h);     // {"tickets","version","done",...}
 *   dnnlab_hybrid_free(h);
 *
 * The spec (JSON): input [dims], classes, layers [{type, units, alpha, init,
 * bias}], init, loss, optimizer {type, lr, momentum, nesterov, weight_decay,
 * beta1, beta2, eps}, batch_size, seed (a number up to 2^53, or decimal digits
 * as a string for any 64-bit seed), epochs, schedule {type, step_epochs,
 * gamma, min_lr, warmup_epochs}. Unknown keys are errors (typos fail loudly).
 */
#ifndef DNNLAB_WASM_H
#define DNNLAB_WASM_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum dnnlab_status {
  DNNLAB_OK = 0,
  DNNLAB_ERR_SPEC = 1,     /* malformed JSON, unknown layer, bad values */
  DNNLAB_ERR_SHAPE = 2,    /* sizes that do not fit the model */
  DNNLAB_ERR_NUMERIC = 3,  /* NaN/inf in inputs, parameters or the loss */
  DNNLAB_ERR_DATA = 4,     /* malformed safetensors bytes, bad labels */
  DNNLAB_ERR_ARGUMENT = 5, /* null handle, no data loaded, negative counts */
  DNNLAB_ERR_INTERNAL = 6  /* out of memory or any other failure */
};

typedef struct dnnlab_model dnnlab_model;
typedef struct dnnlab_shard dnnlab_shard;

enum dnnlab_split { DNNLAB_SPLIT_TRAIN = 0, DNNLAB_SPLIT_VAL = 1, DNNLAB_SPLIT_TEST = 2 };

/* The status and message of the last failed call ("" after none). */
int dnnlab_last_status(void);
const char* dnnlab_last_error(void);
/* Name of the kernel table in use ("wasm-simd128" in the browser build). */
const char* dnnlab_kernels_name(void);

/* NULL on error. The model owns its optimizer state and a copy of loaded data. */
dnnlab_model* dnnlab_model_create(const char* spec_json);
void dnnlab_model_free(dnnlab_model* m);
/* Floats in the flat parameter buffer (-1 on error), and the sample size. */
int32_t dnnlab_model_num_params(dnnlab_model* m);
int32_t dnnlab_model_input_size(dnnlab_model* m);

/* The parameters as one flat float32 buffer of exactly num_params floats, in
 * layer order (weight then bias). set rejects non-finite values. */
int dnnlab_model_get_params(dnnlab_model* m, float* out, int32_t count);
int dnnlab_model_set_params(dnnlab_model* m, const float* in, int32_t count);
/* The training state beyond the parameters, for continuing a run on another
 * backend (src/wasm/webgpu): each parameter's optimizer state in parameter
 * order (state1, then state2 and state3 where the optimizer keeps them: SGD
 * velocity; Adam m, v; AdaGrad sum; RMSprop square average, momentum buffer,
 * gradient average), then BatchNorm's running mean and variance, layer by
 * layer. num_state: floats (-1 on error); counters[2] = optimizer steps,
 * epochs done. set rejects non-finite values and a model mid-epoch. */
int32_t dnnlab_model_num_state(dnnlab_model* m);
int dnnlab_model_get_state(dnnlab_model* m, float* out, int32_t count, double* counters);
int dnnlab_model_set_state(dnnlab_model* m, const float* in, int32_t count, const double* counters);
/* Safetensors bytes: save returns a pointer owned by the model, valid until
 * the next save or free, and its length in *len. */
const uint8_t* dnnlab_model_save(dnnlab_model* m, int32_t* len);
int dnnlab_model_load(dnnlab_model* m, const uint8_t* bytes, int32_t len);

/* The training set: n samples, x_count = n * input_size floats, labels in
 * [0, classes). Copied; replaces any earlier set and restarts its order. */
int dnnlab_model_load_data(dnnlab_model* m, const float* x, int32_t x_count, const int32_t* y,
                           int32_t n);
/* Epochs over the loaded set, shuffled per epoch as the native Trainer does
 * (same seed, same order). out[4] = last epoch's loss, accuracy, seconds,
 * samples/s. The epoch counter carries on across calls (for the schedule). */
int dnnlab_model_train_epochs(dnnlab_model* m, int32_t epochs, double* out);
/* The order in which the trainer takes n samples in 0-based `epoch` (a
 * permutation of [0, n), from the spec's seed; nn::epoch_order), for another
 * backend to train on the same batches (src/wasm/webgpu). */
int dnnlab_model_epoch_order(dnnlab_model* m, int32_t epoch, int32_t n, int32_t* out);
/* `steps` batches from the loaded set, continuing where the last call left
 * off. out[4] = mean loss, mean accuracy, seconds, samples/s over them. */
int dnnlab_model_train_steps(dnnlab_model* m, int32_t steps, double* out);
/* out[2] = mean loss and accuracy over n samples (not copied). */
int dnnlab_model_evaluate(dnnlab_model* m, const float* x, int32_t x_count, const int32_t* y,
                          int32_t n, double* out);

/* Data shards. open decodes and checks the bytes (copied; DNNLAB_ERR_DATA
 * names the tensor and byte offset of a defect) and normalizes U8 pixels
 * through the shard's lut: the same floats as native loading, bit for bit.
 * NULL on error. */
dnnlab_shard* dnnlab_shard_open(const uint8_t* bytes, int32_t len);
/* JSON: {"dataset","classes","sample_shape":[..],"features","normalize",
 * "dataset_sha256","train","val","test"} (split sizes). Owned by the shard. */
const char* dnnlab_shard_info(dnnlab_shard* s);
/* A split's normalized samples (split * features floats) and labels, owned
 * by the shard (valid until it is freed): for a backend outside the core
 * (the WebGPU executor) to upload. NULL on error (a split outside 0..2). */
const float* dnnlab_shard_x(dnnlab_shard* s, int32_t split);
const int32_t* dnnlab_shard_y(dnnlab_shard* s, int32_t split);
/* Models still training on the shard keep its data alive. */
void dnnlab_shard_free(dnnlab_shard* s);

/* Trains on a split of the shard (shared, not copied); replaces any earlier
 * set. The sample size must equal the model's input size. */
int dnnlab_model_use_split(dnnlab_model* m, dnnlab_shard* s, int32_t split);
/* One epoch exactly as the native trainer runs it, then evaluation on
 * val_shard's validation split (none when val_shard is NULL or that split is
 * empty: val metrics 0). out[8] = train_loss, train_acc, val_loss, val_acc,
 * seconds, samples/s, lr, epoch (1-based). A non-finite metric is
 * DNNLAB_ERR_NUMERIC. */
int dnnlab_model_fit_epoch(dnnlab_model* m, dnnlab_shard* val_shard, double* out);
/* The same epoch in pieces, so that a caller can return to its event loop
 * (heartbeats, a pause button) between them: trains up to max_batches more
 * batches of the current epoch (starting the next one if none is under way;
 * 0 = all that are left). out[10]: out[8], out[9] = samples done and samples
 * in the epoch; when they are equal the epoch has ended and out[0..7] are as
 * fit_epoch's (validation included), otherwise out[0..6] are 0 and out[7] is
 * the epoch under way. The numbers are the same whatever the pieces. A new
 * training set (load_data, use_split) starts the epoch over. */
int dnnlab_model_fit_epoch_part(dnnlab_model* m, dnnlab_shard* val_shard, int32_t max_batches,
                                double* out);
/* out[2] = mean loss and accuracy over a split of the shard. */
int dnnlab_model_evaluate_split(dnnlab_model* m, dnnlab_shard* s, int32_t split, double* out);

/* Hybrid clients. create checks that the shard's train split is the
 * server's (fingerprint: the welcome's data_fingerprint, else
 * DNNLAB_ERR_DATA) and builds the spec's `features` part (the spec must have
 * `parts`, the first named features). NULL on error. */
typedef struct dnnlab_hybrid dnnlab_hybrid;
dnnlab_hybrid* dnnlab_hybrid_create(const char* spec_json, dnnlab_shard* s,
                                    const char* fingerprint);
/* One binary frame from the server (the bytes are not kept). *reply_len is
 * the length of the frame to send back, 0 for none; its bytes are at
 * dnnlab_hybrid_reply(h) until the next call. A malformed frame, one for a
 * version this client does not hold or an index outside the shard is an
 * error: the client should leave. */
int dnnlab_hybrid_frame(dnnlab_hybrid* h, const uint8_t* bytes, int32_t len, int32_t* reply_len);
const uint8_t* dnnlab_hybrid_reply(dnnlab_hybrid* h);
/* JSON {"tickets","version" (null before the first weights),"done" (the
 * server said bye),"frames_in","bytes_in","frames_out","bytes_out"}; owned by
 * the client, valid until the next info call. */
const char* dnnlab_hybrid_info(dnnlab_hybrid* h);
/* Frees the client (the shard's data it kept with it too, unless in use). */
void dnnlab_hybrid_free(dnnlab_hybrid* h);

#ifdef __cplusplus
}
#endif
#endif /* DNNLAB_WASM_H */

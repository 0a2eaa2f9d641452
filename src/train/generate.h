/* generate.h — mode = 'generate': autoregressive sampling from a prompt of token ids with
 * temperature and top-k, on the model the trainer set up.
 * Owns: nothing beyond one call. Uses: model/gpt, io/tokenizer, config/, core/rng.
 * Used by: train/trainer. */
#ifndef LLMT_GENERATE_H
#define LLMT_GENERATE_H
#include "config/config.h"
#include "model/gpt.h"
#include "parallel/grid.h"

/* Sample max_new_tokens after the prompt; rank 0 prints the ids (and the text, given a
 * tokenizer). */
void generate_run(const config_t *cfg, const grid_t *grid, gpt_t *m);
/* Draw a token from softmax(logits[V] / temperature) over the top_k largest logits (0 = all;
 * temperature 0 = argmax) with the uniform number u in (0,1). Overwrites logits; scratch[V]. */
int sample_token(float *logits, int V, double temperature, int top_k, float u, float *scratch);
#endif

/*
 * IEEE infinities, NaNs and signed zeros for the SPIR-V that IREE hands to
 * Vulkan.
 *
 * Why: the Vulkan environment lets a driver assume that floating-point values
 * are never infinite or NaN and that the sign of a zero does not matter
 * (the NotInf, NotNaN and NSZ fast-math flags) in every entry point that does
 * not declare the SignedZeroInfNanPreserve execution mode for that width
 * (Vulkan spec, "Precision and Operation of SPIR-V Instructions";
 * SPV_KHR_float_controls). IREE 3.13 never declares it, and Mesa's lavapipe
 * uses the freedom: `x - x` folds to 0 for x = inf or NaN, so softmax([inf])
 * gave 1.0 where PyTorch gives NaN. PyTorch computes with IEEE semantics, so
 * lazy-mlir's Vulkan layer adds the mode to every compute shader, for each
 * float width the module uses and the device can preserve.
 *
 * What it cannot fix: lavapipe's code generator (gallivm's lp_build_mul and
 * lp_build_add, Mesa 22.3) returns 0 for `x * 0.0` and x for `x + 0.0` when
 * the zero is a constant of the shader, whatever the shader declares, so a
 * multiply by a literal zero loses infinities, NaNs and negative zeros there
 * (test_vulkan_float_controls.py keeps an xfail that shows it).
 *
 * lazy_mlir_preserve_ieee_floats is pure (no Vulkan calls), so tests reach it
 * through ctypes. The layer calls it from vkCreateShaderModule
 * (vulkan_monotonic_signals.c).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LAYER_EXPORT __attribute__((visibility("default")))

enum {
  kMagic = 0x07230203,
  kHeaderWords = 5,
  kOpExtension = 10,
  kOpEntryPoint = 15,
  kOpExecutionMode = 16,
  kOpCapability = 17,
  kCapabilityFloat16 = 9,
  kCapabilityFloat64 = 10,
  kCapabilitySignedZeroInfNanPreserve = 4466,
  kExecutionModeSignedZeroInfNanPreserve = 4461,
  kMaxEntryPoints = 256,
  /* Bit i of a width mask stands for width 16 << i: 1 = 16, 2 = 32, 4 = 64. */
  kWidth16 = 1,
  kWidth32 = 2,
  kWidth64 = 4,
};

/* "SPV_KHR_float_controls" with its NUL, padded to whole words (23 bytes -> 6). */
static const char kExtensionName[24] = "SPV_KHR_float_controls";
enum { kExtensionWords = 6 };

/*
 * A copy of the SPIR-V module `code` (`words` 32-bit words) that declares
 * SignedZeroInfNanPreserve for every entry point and every float width it
 * uses (32 always; 16 and 64 when the module declares Float16 / Float64)
 * that is in `supported` (a width mask, see above). Returns NULL, leaving the
 * module to be used as it is, when the module already declares the mode, the
 * device keeps no width, or the module is not one this function understands. The caller frees the result with
 * lazy_mlir_free_spirv; *out_words receives its length.
 */
LAYER_EXPORT uint32_t* lazy_mlir_preserve_ieee_floats(const uint32_t* code, size_t words,
                                                       uint32_t supported, size_t* out_words) {
  if (!code || words < kHeaderWords || code[0] != kMagic) return NULL;
  uint32_t widths = kWidth32;
  int has_extension = 0;
  size_t first_non_capability = 0, after_entry_points = 0;
  uint32_t entry_ids[kMaxEntryPoints];
  size_t n_entries = 0;
  size_t at = kHeaderWords;
  while (at < words) {
    uint32_t count = code[at] >> 16, opcode = code[at] & 0xffff;
    if (count == 0 || at + count > words) return NULL; /* malformed: leave it to the driver */
    if (opcode == kOpCapability && count == 2) {
      if (code[at + 1] == kCapabilitySignedZeroInfNanPreserve) return NULL; /* already declared */
      if (code[at + 1] == kCapabilityFloat16) widths |= kWidth16;
      if (code[at + 1] == kCapabilityFloat64) widths |= kWidth64;
    } else if (!first_non_capability) {
      first_non_capability = at;
    }
    if (opcode == kOpExtension && (count - 1) * 4 >= sizeof(kExtensionName) &&
        !memcmp(&code[at + 1], kExtensionName, sizeof(kExtensionName) - 1)) {
      has_extension = 1;
    }
    if (opcode == kOpEntryPoint && count >= 3) {
      if (n_entries == kMaxEntryPoints) return NULL;
      entry_ids[n_entries++] = code[at + 2];
      after_entry_points = at + count;
    }
    at += count;
  }
  widths &= supported;
  if (!widths || !n_entries || !first_non_capability) return NULL;

  size_t n_widths = (size_t)__builtin_popcount(widths);
  size_t added = 2 + (has_extension ? 0 : 1 + kExtensionWords) + n_entries * n_widths * 4;
  uint32_t* out = malloc((words + added) * sizeof(uint32_t));
  if (!out) return NULL;
  size_t n = 0;
  memcpy(out, code, kHeaderWords * sizeof(uint32_t));
  n = kHeaderWords;
  out[n++] = (2u << 16) | kOpCapability;
  out[n++] = kCapabilitySignedZeroInfNanPreserve;
  /* The rest of the capabilities, then the extension (SPIR-V before 1.4 needs it named). */
  memcpy(&out[n], &code[kHeaderWords], (first_non_capability - kHeaderWords) * sizeof(uint32_t));
  n += first_non_capability - kHeaderWords;
  if (!has_extension) {
    out[n++] = ((1u + kExtensionWords) << 16) | kOpExtension;
    memcpy(&out[n], kExtensionName, kExtensionWords * sizeof(uint32_t));
    n += kExtensionWords;
  }
  /* Everything up to the last entry point, then the new modes (the mode section follows it). */
  memcpy(&out[n], &code[first_non_capability],
         (after_entry_points - first_non_capability) * sizeof(uint32_t));
  n += after_entry_points - first_non_capability;
  for (size_t e = 0; e < n_entries; ++e) {
    for (uint32_t bit = 0; bit < 3; ++bit) {
      if (!(widths & (1u << bit))) continue;
      out[n++] = (4u << 16) | kOpExecutionMode;
      out[n++] = entry_ids[e];
      out[n++] = kExecutionModeSignedZeroInfNanPreserve;
      out[n++] = 16u << bit;
    }
  }
  memcpy(&out[n], &code[after_entry_points], (words - after_entry_points) * sizeof(uint32_t));
  n += words - after_entry_points;
  *out_words = n;
  return out;
}

LAYER_EXPORT void lazy_mlir_free_spirv(uint32_t* code) { free(code); }

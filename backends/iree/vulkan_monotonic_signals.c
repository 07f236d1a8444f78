/*
 * VK_LAYER_LAZY_MLIR_iree_fixes: a Vulkan layer that makes host
 * timeline-semaphore signals (vkSignalSemaphore) take turns, and absorbs a
 * signal whose value the semaphore has already reached. It also passes every
 * shader module through vulkan_float_controls.c, which declares IEEE
 * infinities, NaNs and signed zeros (its header says why).
 *
 * Why: IREE 3.13's Vulkan queue wakes its completion thread with
 * iree_hal_vulkan_queue_signal_wakeup (runtime/src/iree/hal/drivers/vulkan/
 * queue.c), which takes the next value from an atomic counter and then calls
 * vkSignalSemaphore outside any lock. Two threads promoting deferred
 * submissions at once (a host thread and IREE's completion thread) can signal
 * 6 and then 5. The spec forbids a value that is not greater than the current
 * one (VUID-VkSemaphoreSignalInfo-value-03258) and Mesa's lavapipe answers it
 * by marking the whole device lost: every later call of the process fails
 * with VK_ERROR_DEVICE_LOST. The wake-up has already happened when the higher
 * value landed, so dropping the late, lower signal keeps IREE's meaning.
 *
 * Only host signals, wait-any waits on lavapipe (below) and shader modules
 * pass through here; queue submissions are untouched.
 * lazy-mlir builds this file with the system C compiler on first use of the
 * IREE Vulkan backend (backends/iree/vulkan_layer.py) and enables it through
 * the loader's VK_ADD_LAYER_PATH / VK_INSTANCE_LAYERS. The layer follows the
 * Vulkan loader's layer interface (LoaderLayerInterface.md, interface
 * version 0/1: the manifest names the two proc-address functions).
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <vulkan/vk_layer.h>
#include <vulkan/vulkan.h>

#define LAYER_EXPORT __attribute__((visibility("default")))

/* Instances and devices this layer has seen, with the next layer's entry
 * points. A process opens a handful: fixed tables, guarded by one lock. */
enum { kMaxInstances = 32, kMaxDevices = 64 };

typedef struct {
  VkInstance instance;
  PFN_vkGetInstanceProcAddr next_gipa;
  PFN_vkDestroyInstance next_destroy;
} instance_entry_t;

typedef struct {
  VkDevice device;
  PFN_vkGetDeviceProcAddr next_gdpa;
  PFN_vkDestroyDevice next_destroy;
  PFN_vkSignalSemaphore next_signal;
  PFN_vkSignalSemaphoreKHR next_signal_khr;
  PFN_vkGetSemaphoreCounterValue next_counter;
  PFN_vkCreateShaderModule next_create_shader;
  PFN_vkWaitSemaphores next_wait;
  PFN_vkWaitSemaphoresKHR next_wait_khr;
  /* lavapipe (Mesa's llvmpipe driver): its wait-any spins (layer_WaitSemaphores). */
  int spinning_wait_any;
  /* Float widths whose IEEE specials the device can keep (vulkan_float_controls.c). */
  uint32_t ieee_widths;
  /* Host signals of this device take turns: the check and the signal are one step. */
  pthread_mutex_t signal_lock;
} device_entry_t;

static pthread_mutex_t g_table_lock = PTHREAD_MUTEX_INITIALIZER;
static instance_entry_t g_instances[kMaxInstances];
static device_entry_t g_devices[kMaxDevices];
static uint64_t g_absorbed;
static uint64_t g_sleeping_waits;

/* How many wait-any calls this layer answered by polling with sleeps (read by lazy-mlir's tests). */
LAYER_EXPORT uint64_t lazy_mlir_sleeping_waits(void) {
  return __atomic_load_n(&g_sleeping_waits, __ATOMIC_RELAXED);
}

/* How many late, lower signals were dropped (read by lazy-mlir's tests). */
LAYER_EXPORT uint64_t lazy_mlir_absorbed_signals(void) {
  return __atomic_load_n(&g_absorbed, __ATOMIC_RELAXED);
}

static instance_entry_t* find_instance(VkInstance instance) {
  for (int i = 0; i < kMaxInstances; ++i) {
    if (g_instances[i].instance == instance) return &g_instances[i];
  }
  return NULL;
}

static device_entry_t* find_device(VkDevice device) {
  for (int i = 0; i < kMaxDevices; ++i) {
    if (g_devices[i].device == device) return &g_devices[i];
  }
  return NULL;
}

static device_entry_t* lookup_device(VkDevice device) {
  if (device == VK_NULL_HANDLE) return NULL; /* empty slots hold VK_NULL_HANDLE */
  pthread_mutex_lock(&g_table_lock);
  device_entry_t* entry = find_device(device);
  pthread_mutex_unlock(&g_table_lock);
  return entry;
}

static VkResult signal_in_order(VkDevice device, const VkSemaphoreSignalInfo* info,
                                int khr) {
  device_entry_t* d = lookup_device(device);
  if (!d) return VK_ERROR_INITIALIZATION_FAILED;
  PFN_vkSignalSemaphore next = khr ? (PFN_vkSignalSemaphore)d->next_signal_khr
                                   : d->next_signal;
  pthread_mutex_lock(&d->signal_lock);
  if (d->next_counter) {
    uint64_t current = 0;
    if (d->next_counter(device, info->semaphore, &current) == VK_SUCCESS &&
        info->value <= current) {
      pthread_mutex_unlock(&d->signal_lock);
      __atomic_add_fetch(&g_absorbed, 1, __ATOMIC_RELAXED);
      return VK_SUCCESS;
    }
  }
  VkResult result = next(device, info);
  pthread_mutex_unlock(&d->signal_lock);
  return result;
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_SignalSemaphore(
    VkDevice device, const VkSemaphoreSignalInfo* info) {
  return signal_in_order(device, info, 0);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_SignalSemaphoreKHR(
    VkDevice device, const VkSemaphoreSignalInfo* info) {
  return signal_in_order(device, info, 1);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * Wait-any on lavapipe without spinning. IREE 3.13's Vulkan queue keeps a
 * completion thread per queue blocked in vkWaitSemaphores(WAIT_ANY) on its
 * wake-up semaphore and the semaphores of work in flight, with no timeout.
 * Mesa's common sync code answers a wait-any over several timeline
 * semaphores of a driver that cannot wait on many at once (lavapipe) by
 * polling them in a loop with no sleep, so every process holding an IREE
 * Vulkan device burned a core per queue even when idle (CI ran 4 such
 * processes on 2 cores: every compile and test ran at a third of its speed).
 * Here the same wait polls the counters and sleeps between polls, 10 us
 * doubling to 500 us: a completion is seen at most 0.5 ms late. Other
 * drivers, and waits on one semaphore or on all, go to the driver as before.
 */
static VkResult wait_semaphores(VkDevice device, const VkSemaphoreWaitInfo* info,
                                uint64_t timeout, int khr) {
  device_entry_t* d = lookup_device(device);
  if (!d) return VK_ERROR_INITIALIZATION_FAILED;
  PFN_vkWaitSemaphores next = khr ? (PFN_vkWaitSemaphores)d->next_wait_khr : d->next_wait;
  if (!next) return VK_ERROR_INITIALIZATION_FAILED; /* asked through vkGetInstanceProcAddr */
  if (!d->spinning_wait_any || !d->next_counter || info->semaphoreCount < 2 ||
      !(info->flags & VK_SEMAPHORE_WAIT_ANY_BIT)) {
    return next(device, info, timeout);
  }
  __atomic_add_fetch(&g_sleeping_waits, 1, __ATOMIC_RELAXED);
  const uint64_t start = now_ns();
  const uint64_t deadline = timeout > UINT64_MAX - start ? UINT64_MAX : start + timeout;
  uint64_t pause = 10000;
  for (;;) {
    for (uint32_t i = 0; i < info->semaphoreCount; ++i) {
      uint64_t value = 0;
      VkResult result = d->next_counter(device, info->pSemaphores[i], &value);
      if (result != VK_SUCCESS) return result;
      if (value >= info->pValues[i]) return VK_SUCCESS;
    }
    const uint64_t now = now_ns();
    if (now >= deadline) return VK_TIMEOUT;
    uint64_t nap = pause < deadline - now ? pause : deadline - now;
    struct timespec ts = {(time_t)(nap / 1000000000ull), (long)(nap % 1000000000ull)};
    nanosleep(&ts, NULL);
    if (pause < 500000) pause *= 2;
  }
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_WaitSemaphores(
    VkDevice device, const VkSemaphoreWaitInfo* info, uint64_t timeout) {
  return wait_semaphores(device, info, timeout, 0);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_WaitSemaphoresKHR(
    VkDevice device, const VkSemaphoreWaitInfo* info, uint64_t timeout) {
  return wait_semaphores(device, info, timeout, 1);
}

uint32_t* lazy_mlir_preserve_ieee_floats(const uint32_t* code, size_t words, uint32_t supported,
                                         size_t* out_words);
void lazy_mlir_free_spirv(uint32_t* code);

/* Every compute shader declares IEEE infinities, NaNs and signed zeros
 * (vulkan_float_controls.c says why). */
static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateShaderModule(
    VkDevice device, const VkShaderModuleCreateInfo* info,
    const VkAllocationCallbacks* allocator, VkShaderModule* module) {
  device_entry_t* d = lookup_device(device);
  if (!d || !d->next_create_shader) return VK_ERROR_INITIALIZATION_FAILED;
  size_t words = 0;
  uint32_t* code = lazy_mlir_preserve_ieee_floats(info->pCode, info->codeSize / 4,
                                                  d->ieee_widths, &words);
  if (!code) return d->next_create_shader(device, info, allocator, module);
  VkShaderModuleCreateInfo patched = *info;
  patched.pCode = code;
  patched.codeSize = words * 4;
  VkResult result = d->next_create_shader(device, &patched, allocator, module);
  lazy_mlir_free_spirv(code);
  return result;
}

/* Fills `properties` (with its pNext chain) for `physical_device` through the
 * next layer; 0 when no instance can say. */
static int physical_properties(VkPhysicalDevice physical_device, VkPhysicalDeviceProperties2* properties) {
  PFN_vkGetPhysicalDeviceProperties2 props2 = NULL;
  pthread_mutex_lock(&g_table_lock);
  for (int i = 0; i < kMaxInstances && !props2; ++i) {
    if (g_instances[i].instance == VK_NULL_HANDLE) continue;
    props2 = (PFN_vkGetPhysicalDeviceProperties2)g_instances[i].next_gipa(
        g_instances[i].instance, "vkGetPhysicalDeviceProperties2");
    if (!props2) {
      props2 = (PFN_vkGetPhysicalDeviceProperties2)g_instances[i].next_gipa(
          g_instances[i].instance, "vkGetPhysicalDeviceProperties2KHR");
    }
  }
  pthread_mutex_unlock(&g_table_lock);
  if (!props2) return 0;
  props2(physical_device, properties);
  return 1;
}

/* The float widths (bit 0: 16, 1: 32, 2: 64) whose signed zeros, infinities and
 * NaNs `physical_device` can preserve; 0 when it cannot say. */
static uint32_t ieee_widths(VkPhysicalDevice physical_device) {
  VkPhysicalDeviceFloatControlsProperties controls = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES};
  VkPhysicalDeviceProperties2 properties = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &controls};
  if (!physical_properties(physical_device, &properties)) return 0;
  return (controls.shaderSignedZeroInfNanPreserveFloat16 ? 1u : 0u) |
         (controls.shaderSignedZeroInfNanPreserveFloat32 ? 2u : 0u) |
         (controls.shaderSignedZeroInfNanPreserveFloat64 ? 4u : 0u);
}

/* Whether `physical_device` is lavapipe, whose wait-any over several semaphores spins. */
static int is_lavapipe(VkPhysicalDevice physical_device) {
  VkPhysicalDeviceDriverProperties driver = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceProperties2 properties = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &driver};
  return physical_properties(physical_device, &properties) &&
         driver.driverID == VK_DRIVER_ID_MESA_LLVMPIPE;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyDevice(
    VkDevice device, const VkAllocationCallbacks* allocator) {
  pthread_mutex_lock(&g_table_lock);
  device_entry_t* d = find_device(device);
  PFN_vkDestroyDevice next = d ? d->next_destroy : NULL;
  if (d) {
    pthread_mutex_destroy(&d->signal_lock);
    memset(d, 0, sizeof(*d));
  }
  pthread_mutex_unlock(&g_table_lock);
  if (next) next(device, allocator);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateDevice(
    VkPhysicalDevice physical_device, const VkDeviceCreateInfo* create_info,
    const VkAllocationCallbacks* allocator, VkDevice* out_device) {
  VkLayerDeviceCreateInfo* chain = (VkLayerDeviceCreateInfo*)create_info->pNext;
  while (chain && !(chain->sType == VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO &&
                    chain->function == VK_LAYER_LINK_INFO)) {
    chain = (VkLayerDeviceCreateInfo*)chain->pNext;
  }
  if (!chain) return VK_ERROR_INITIALIZATION_FAILED;
  PFN_vkGetInstanceProcAddr gipa = chain->u.pLayerInfo->pfnNextGetInstanceProcAddr;
  PFN_vkGetDeviceProcAddr gdpa = chain->u.pLayerInfo->pfnNextGetDeviceProcAddr;
  chain->u.pLayerInfo = chain->u.pLayerInfo->pNext;  /* the next layer's link */

  PFN_vkCreateDevice next_create =
      (PFN_vkCreateDevice)gipa(VK_NULL_HANDLE, "vkCreateDevice");
  if (!next_create) return VK_ERROR_INITIALIZATION_FAILED;
  VkResult result = next_create(physical_device, create_info, allocator, out_device);
  if (result != VK_SUCCESS) return result;

  VkDevice device = *out_device;
  uint32_t widths = ieee_widths(physical_device);
  int lavapipe = is_lavapipe(physical_device);
  pthread_mutex_lock(&g_table_lock);
  device_entry_t* d = find_device(VK_NULL_HANDLE);
  if (d) {
    d->device = device;
    d->next_gdpa = gdpa;
    d->next_destroy = (PFN_vkDestroyDevice)gdpa(device, "vkDestroyDevice");
    d->next_signal = (PFN_vkSignalSemaphore)gdpa(device, "vkSignalSemaphore");
    d->next_signal_khr = (PFN_vkSignalSemaphoreKHR)gdpa(device, "vkSignalSemaphoreKHR");
    d->next_counter =
        (PFN_vkGetSemaphoreCounterValue)gdpa(device, "vkGetSemaphoreCounterValue");
    if (!d->next_counter) {
      d->next_counter = (PFN_vkGetSemaphoreCounterValue)gdpa(
          device, "vkGetSemaphoreCounterValueKHR");
    }
    d->next_create_shader = (PFN_vkCreateShaderModule)gdpa(device, "vkCreateShaderModule");
    d->next_wait = (PFN_vkWaitSemaphores)gdpa(device, "vkWaitSemaphores");
    d->next_wait_khr = (PFN_vkWaitSemaphoresKHR)gdpa(device, "vkWaitSemaphoresKHR");
    d->spinning_wait_any = lavapipe;
    d->ieee_widths = widths;
    pthread_mutex_init(&d->signal_lock, NULL);
  }
  pthread_mutex_unlock(&g_table_lock);
  if (!d) {
    /* Out of slots: refuse the device rather than hand it out unprotected. */
    PFN_vkDestroyDevice destroy = (PFN_vkDestroyDevice)gdpa(device, "vkDestroyDevice");
    if (destroy) destroy(device, allocator);
    return VK_ERROR_TOO_MANY_OBJECTS;
  }
  return VK_SUCCESS;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyInstance(
    VkInstance instance, const VkAllocationCallbacks* allocator) {
  pthread_mutex_lock(&g_table_lock);
  instance_entry_t* entry = find_instance(instance);
  PFN_vkDestroyInstance next = entry ? entry->next_destroy : NULL;
  if (entry) memset(entry, 0, sizeof(*entry));
  pthread_mutex_unlock(&g_table_lock);
  if (next) next(instance, allocator);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateInstance(
    const VkInstanceCreateInfo* create_info, const VkAllocationCallbacks* allocator,
    VkInstance* out_instance) {
  VkLayerInstanceCreateInfo* chain = (VkLayerInstanceCreateInfo*)create_info->pNext;
  while (chain && !(chain->sType == VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO &&
                    chain->function == VK_LAYER_LINK_INFO)) {
    chain = (VkLayerInstanceCreateInfo*)chain->pNext;
  }
  if (!chain) return VK_ERROR_INITIALIZATION_FAILED;
  PFN_vkGetInstanceProcAddr gipa = chain->u.pLayerInfo->pfnNextGetInstanceProcAddr;
  chain->u.pLayerInfo = chain->u.pLayerInfo->pNext;

  PFN_vkCreateInstance next_create =
      (PFN_vkCreateInstance)gipa(VK_NULL_HANDLE, "vkCreateInstance");
  if (!next_create) return VK_ERROR_INITIALIZATION_FAILED;
  VkResult result = next_create(create_info, allocator, out_instance);
  if (result != VK_SUCCESS) return result;

  pthread_mutex_lock(&g_table_lock);
  instance_entry_t* entry = find_instance(VK_NULL_HANDLE);
  if (entry) {
    entry->instance = *out_instance;
    entry->next_gipa = gipa;
    entry->next_destroy = (PFN_vkDestroyInstance)gipa(*out_instance, "vkDestroyInstance");
  }
  pthread_mutex_unlock(&g_table_lock);
  if (!entry) {
    PFN_vkDestroyInstance destroy =
        (PFN_vkDestroyInstance)gipa(*out_instance, "vkDestroyInstance");
    if (destroy) destroy(*out_instance, allocator);
    return VK_ERROR_TOO_MANY_OBJECTS;
  }
  return VK_SUCCESS;
}

LAYER_EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL
lazy_mlir_GetDeviceProcAddr(VkDevice device, const char* name) {
  device_entry_t* d = lookup_device(device);
  if (!strcmp(name, "vkGetDeviceProcAddr")) return (PFN_vkVoidFunction)lazy_mlir_GetDeviceProcAddr;
  if (!strcmp(name, "vkDestroyDevice")) return (PFN_vkVoidFunction)layer_DestroyDevice;
  if (!strcmp(name, "vkSignalSemaphore")) {
    return d && d->next_signal ? (PFN_vkVoidFunction)layer_SignalSemaphore : NULL;
  }
  if (!strcmp(name, "vkSignalSemaphoreKHR")) {
    return d && d->next_signal_khr ? (PFN_vkVoidFunction)layer_SignalSemaphoreKHR : NULL;
  }
  if (!strcmp(name, "vkCreateShaderModule")) {
    return d && d->next_create_shader ? (PFN_vkVoidFunction)layer_CreateShaderModule : NULL;
  }
  if (!strcmp(name, "vkWaitSemaphores")) {
    return d && d->next_wait ? (PFN_vkVoidFunction)layer_WaitSemaphores : NULL;
  }
  if (!strcmp(name, "vkWaitSemaphoresKHR")) {
    return d && d->next_wait_khr ? (PFN_vkVoidFunction)layer_WaitSemaphoresKHR : NULL;
  }
  return d ? d->next_gdpa(device, name) : NULL;
}

LAYER_EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL
lazy_mlir_GetInstanceProcAddr(VkInstance instance, const char* name) {
  if (!strcmp(name, "vkGetInstanceProcAddr")) return (PFN_vkVoidFunction)lazy_mlir_GetInstanceProcAddr;
  if (!strcmp(name, "vkCreateInstance")) return (PFN_vkVoidFunction)layer_CreateInstance;
  if (!strcmp(name, "vkDestroyInstance")) return (PFN_vkVoidFunction)layer_DestroyInstance;
  if (!strcmp(name, "vkCreateDevice")) return (PFN_vkVoidFunction)layer_CreateDevice;
  if (!strcmp(name, "vkGetDeviceProcAddr")) return (PFN_vkVoidFunction)lazy_mlir_GetDeviceProcAddr;
  if (!strcmp(name, "vkDestroyDevice")) return (PFN_vkVoidFunction)layer_DestroyDevice;
  if (!strcmp(name, "vkSignalSemaphore")) return (PFN_vkVoidFunction)layer_SignalSemaphore;
  if (!strcmp(name, "vkSignalSemaphoreKHR")) return (PFN_vkVoidFunction)layer_SignalSemaphoreKHR;
  if (!strcmp(name, "vkCreateShaderModule")) return (PFN_vkVoidFunction)layer_CreateShaderModule;
  if (!strcmp(name, "vkWaitSemaphores")) return (PFN_vkVoidFunction)layer_WaitSemaphores;
  if (!strcmp(name, "vkWaitSemaphoresKHR")) return (PFN_vkVoidFunction)layer_WaitSemaphoresKHR;
  if (instance == VK_NULL_HANDLE) return NULL;
  pthread_mutex_lock(&g_table_lock);
  instance_entry_t* entry = find_instance(instance);
  PFN_vkGetInstanceProcAddr next = entry ? entry->next_gipa : NULL;
  pthread_mutex_unlock(&g_table_lock);
  return next ? next(instance, name) : NULL;
}

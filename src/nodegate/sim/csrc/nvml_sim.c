/*
 * nodegate simulated NVML: a libnvidia-ml.so.1 that the real nvidia-ml-py (pynvml) loads.
 *
 * Why C and not a Python mock: the point is that the real ctypes bindings, their struct
 * layouts and their error mapping run unchanged. The library knows nothing about YAML; the
 * Python side (nodegate.sim.state) resolves a scenario plus faults into a flat text file,
 * $NODEGATE_SIM_DIR/state, read once at nvmlInit. Load marks ($NODEGATE_SIM_DIR/load/<index>,
 * lines "<epoch seconds> <utilization pct>") are re-read on every telemetry call so a running
 * process sees temperature, power and energy respond to a load started by another process.
 *
 * Flat state format (one "key=value" per line, '#' comments):
 *   [system]        driver=, nvml=, cuda=, epoch=
 *   [gpu N]         per-GPU scalar keys (see gpu_fields below)
 *                   link.M.<key> (see link_fields), proc.K.<key> (see proc_fields)
 *                   nvml_error.<nvmlDevice function>=<nvmlReturn_t>: that call (and its _vN
 *                   versions) returns the code for this GPU, as a driver that times out,
 *                   refuses or does not support it would
 * Counter values are "base rate": the reported value is base + rate * (now - epoch).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_UNKNOWN = 999
};

/* Clock event (throttle) reason bits, as nvml.h defines them. */
#define REASON_GPU_IDLE 0x1ULL
#define REASON_SW_POWER_CAP 0x4ULL
#define REASON_HW_SLOWDOWN 0x8ULL
#define REASON_SW_THERMAL 0x20ULL
#define REASON_HW_THERMAL 0x40ULL
#define REASON_HW_POWER_BRAKE 0x80ULL
#define REASON_SUPPORTED 0x1FFULL

#define MAX_GPUS 64
#define MAX_LINKS 36
#define MAX_PROCS 16
#define MAX_PAGES 64
#define MAX_SEGMENTS 4096
#define MAX_INJECTED 64

/* ------------------------------------------------------------------ public struct layouts */
/* Each mirrors the ctypes Structure of the same name in pynvml. */

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned int version;
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    unsigned int baseClass;
    unsigned int subClass;
    char busId[32];
} nvmlPciInfoExt_v1_t;
#define nvmlPciInfoExt_v1 0x1000040u

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 0x02000028u

typedef struct {
    unsigned long long bar1Total, bar1Free, bar1Used;
} nvmlBAR1Memory_t;

typedef struct {
    unsigned int version;
    unsigned int sensorType;
    int temperature;
} nvmlTemperature_v1_t;
#define nvmlTemperature_v1 0x100000Cu

typedef struct {
    unsigned long long l1Cache, l2Cache, deviceMemory, registerFile;
} nvmlEccErrorCounts_t;

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned int state;
} nvmlGpuFabricInfo_t;

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned int state;
    unsigned int healthMask;
    unsigned char healthSummary;
} nvmlGpuFabricInfo_v3_t;
#define nvmlGpuFabricInfo_v2 0x02000024u
#define nvmlGpuFabricInfo_v3 0x03000028u

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    unsigned int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

typedef struct {
    unsigned int version;
    char branch[80];
} nvmlSystemDriverBranchInfo_v1_t;
#define nvmlSystemDriverBranchInfo_v1 0x1000054u

enum { VT_DOUBLE = 0, VT_UINT = 1, VT_ULONG = 2, VT_ULL = 3, VT_SLL = 4, VT_SINT = 5 };

/* ------------------------------------------------------------------ simulator state */

typedef struct {
    double base, rate;
} counter_t;

typedef struct {
    unsigned int state;   /* 1 active, 0 inactive */
    unsigned int version; /* NVLink generation (3 Ampere, 4 Hopper); see nvlink_version_enum */
    unsigned int remote_type; /* 0 GPU, 2 NVSwitch */
    char remote_bus[32];
    unsigned int remote_device_id;
    unsigned int speed_mbps;
    counter_t crc_flit, crc_data, replay, recovery, ecc_data;
} sim_link;

typedef struct {
    unsigned int pid;
    unsigned long long used_mib;
    char name[64];
} sim_proc;

typedef struct sim_gpu {
    unsigned int index;
    unsigned int lost;
    unsigned int hang; /* nvml-hang: every per-device call blocks (a wedged GPU/driver) */
    char name[96], uuid[96], serial[32], part_number[80], vbios[32];
    char inforom_image[16], inforom_oem[16], inforom_ecc[16], inforom_power[16];
    unsigned int inforom_corrupted; /* nvmlDeviceValidateInforom's checksum verdict */
    char bus_id[32];
    unsigned int domain, bus, device, function;
    unsigned int pci_device_id, pci_subsystem_id;
    unsigned int architecture, cc_major, cc_minor, brand, minor_number, module_id, board_id;
    int numa_node;
    unsigned long long mem_total_mib, mem_reserved_mib, mem_used_mib, bar1_mib;
    unsigned int mem_bus_width, num_cores;
    /* thermal model */
    double temp_idle, temp_load, mem_temp_idle, mem_temp_load, tau_s;
    unsigned int temp_slowdown, temp_shutdown, temp_gpu_max, temp_mem_max;
    /* power, in milliwatts */
    unsigned int power_limit, power_default_limit, power_min_limit, power_max_limit;
    double power_idle, power_load, power_cap;
    double energy0_mj;
    /* clocks, MHz */
    unsigned int clk_graphics_max, clk_sm_max, clk_mem_max, clk_video_max;
    unsigned int clk_graphics_idle, clk_mem_idle, clk_video_idle;
    unsigned int clk_app_graphics, clk_app_mem, clk_default_app_graphics, clk_default_app_mem;
    unsigned int clk_cap; /* 0 none; otherwise SM/graphics never exceed it */
    unsigned long long static_reasons;
    unsigned int util_base;
    /* PCIe */
    /* pcie_gen: the generation the link trains to when busy; pcie_idle_gen: when idle */
    unsigned int pcie_gen, pcie_width, pcie_max_gen, pcie_max_width, pcie_gpu_max_gen;
    unsigned int pcie_idle_gen;
    counter_t pcie_replay;
    /* ECC */
    unsigned int ecc_current, ecc_pending, ecc_default;
    counter_t sbe_vol, dbe_vol, sbe_agg, dbe_agg;
    unsigned int remap_corr, remap_unc, remap_pending, remap_failure;
    unsigned long long retired_sbe[MAX_PAGES], retired_dbe[MAX_PAGES];
    unsigned int n_retired_sbe, n_retired_dbe, retired_pending;
    /* NVLink */
    unsigned int nvlink_count;
    sim_link links[MAX_LINKS];
    /* modes */
    unsigned int persistence, mig_current, mig_pending, compute_mode;
    /* fabric (Hopper) */
    unsigned int fabric_supported, fabric_state, fabric_clique, fabric_health_mask;
    int fabric_status;
    unsigned char fabric_cluster_uuid[16];
    /* NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: NOT_SUPPORTED unless supported */
    unsigned int recovery_supported, recovery_action;
    /* processes */
    unsigned int n_procs;
    sim_proc procs[MAX_PROCS];
    /* injected NVML return codes, by function name (the scenario's nvml_errors) */
    unsigned int n_injected;
    struct {
        char fn[96];
        nvmlReturn_t code;
    } injected[MAX_INJECTED];
} sim_gpu;

static struct {
    int refcount;
    char driver[80], nvml[80];
    int cuda;
    double epoch;
    unsigned int count;
    char dir[4096];
} g_sys;

static sim_gpu g_gpus[MAX_GPUS];

/* ------------------------------------------------------------------ state file parsing */

enum ftype { F_STR, F_U32, F_I32, F_U64, F_DBL, F_CTR, F_HEX16, F_U64S };

typedef struct {
    const char *key;
    enum ftype type;
    size_t off;
    size_t size; /* buffer size for F_STR, capacity for F_U64S */
    size_t count_off; /* element counter for F_U64S */
} field_t;

#define FS(k, m) {k, F_STR, offsetof(sim_gpu, m), sizeof(((sim_gpu *)0)->m), 0}
#define FU(k, m) {k, F_U32, offsetof(sim_gpu, m), 0, 0}
#define FI(k, m) {k, F_I32, offsetof(sim_gpu, m), 0, 0}
#define FL(k, m) {k, F_U64, offsetof(sim_gpu, m), 0, 0}
#define FD(k, m) {k, F_DBL, offsetof(sim_gpu, m), 0, 0}
#define FC(k, m) {k, F_CTR, offsetof(sim_gpu, m), 0, 0}

static const field_t gpu_fields[] = {
    FU("lost", lost), FU("hang", hang), FS("name", name), FS("uuid", uuid), FS("serial", serial),
    FS("part_number", part_number), FS("vbios", vbios), FS("inforom_image", inforom_image),
    FS("inforom_oem", inforom_oem), FS("inforom_ecc", inforom_ecc),
    FS("inforom_power", inforom_power), FU("inforom_corrupted", inforom_corrupted),
    FS("bus_id", bus_id), FU("domain", domain),
    FU("bus", bus), FU("device", device), FU("function", function),
    FU("pci_device_id", pci_device_id), FU("pci_subsystem_id", pci_subsystem_id),
    FU("architecture", architecture), FU("cc_major", cc_major), FU("cc_minor", cc_minor),
    FU("brand", brand), FU("minor_number", minor_number), FU("module_id", module_id),
    FU("board_id", board_id), FI("numa_node", numa_node), FL("mem_total_mib", mem_total_mib),
    FL("mem_reserved_mib", mem_reserved_mib), FL("mem_used_mib", mem_used_mib),
    FL("bar1_mib", bar1_mib), FU("mem_bus_width", mem_bus_width), FU("num_cores", num_cores),
    FD("temp_idle", temp_idle), FD("temp_load", temp_load), FD("mem_temp_idle", mem_temp_idle),
    FD("mem_temp_load", mem_temp_load), FD("tau_s", tau_s), FU("temp_slowdown", temp_slowdown),
    FU("temp_shutdown", temp_shutdown), FU("temp_gpu_max", temp_gpu_max),
    FU("temp_mem_max", temp_mem_max), FU("power_limit", power_limit),
    FU("power_default_limit", power_default_limit), FU("power_min_limit", power_min_limit),
    FU("power_max_limit", power_max_limit), FD("power_idle", power_idle),
    FD("power_load", power_load), FD("power_cap", power_cap), FD("energy0_mj", energy0_mj),
    FU("clk_graphics_max", clk_graphics_max), FU("clk_sm_max", clk_sm_max),
    FU("clk_mem_max", clk_mem_max), FU("clk_video_max", clk_video_max),
    FU("clk_graphics_idle", clk_graphics_idle), FU("clk_mem_idle", clk_mem_idle),
    FU("clk_video_idle", clk_video_idle), FU("clk_app_graphics", clk_app_graphics),
    FU("clk_app_mem", clk_app_mem), FU("clk_default_app_graphics", clk_default_app_graphics),
    FU("clk_default_app_mem", clk_default_app_mem), FU("clk_cap", clk_cap),
    FL("static_reasons", static_reasons), FU("util_base", util_base),
    FU("pcie_gen", pcie_gen), FU("pcie_width", pcie_width), FU("pcie_max_gen", pcie_max_gen),
    FU("pcie_max_width", pcie_max_width), FU("pcie_gpu_max_gen", pcie_gpu_max_gen),
    FU("pcie_idle_gen", pcie_idle_gen),
    FC("pcie_replay", pcie_replay), FU("ecc_current", ecc_current),
    FU("ecc_pending", ecc_pending), FU("ecc_default", ecc_default), FC("sbe_vol", sbe_vol),
    FC("dbe_vol", dbe_vol), FC("sbe_agg", sbe_agg), FC("dbe_agg", dbe_agg),
    FU("remap_corr", remap_corr), FU("remap_unc", remap_unc),
    FU("remap_pending", remap_pending), FU("remap_failure", remap_failure),
    {"retired_sbe", F_U64S, offsetof(sim_gpu, retired_sbe), MAX_PAGES,
     offsetof(sim_gpu, n_retired_sbe)},
    {"retired_dbe", F_U64S, offsetof(sim_gpu, retired_dbe), MAX_PAGES,
     offsetof(sim_gpu, n_retired_dbe)},
    FU("retired_pending", retired_pending), FU("nvlink_count", nvlink_count),
    FU("persistence", persistence), FU("mig_current", mig_current),
    FU("mig_pending", mig_pending), FU("compute_mode", compute_mode),
    FU("fabric_supported", fabric_supported), FU("fabric_state", fabric_state),
    FI("fabric_status", fabric_status), FU("fabric_clique", fabric_clique),
    FU("fabric_health_mask", fabric_health_mask),
    FU("recovery_supported", recovery_supported), FU("recovery_action", recovery_action),
    {"fabric_cluster_uuid", F_HEX16, offsetof(sim_gpu, fabric_cluster_uuid), 16, 0},
    {NULL, F_U32, 0, 0, 0}};

#define LU(k, m) {k, F_U32, offsetof(sim_link, m), 0, 0}
#define LC(k, m) {k, F_CTR, offsetof(sim_link, m), 0, 0}
static const field_t link_fields[] = {
    LU("state", state), LU("version", version), LU("remote_type", remote_type),
    {"remote_bus", F_STR, offsetof(sim_link, remote_bus), 32, 0},
    LU("remote_device_id", remote_device_id), LU("speed_mbps", speed_mbps),
    LC("crc_flit", crc_flit), LC("crc_data", crc_data), LC("replay", replay),
    LC("recovery", recovery), LC("ecc_data", ecc_data), {NULL, F_U32, 0, 0, 0}};

static const field_t proc_fields[] = {
    {"pid", F_U32, offsetof(sim_proc, pid), 0, 0},
    {"used_mib", F_U64, offsetof(sim_proc, used_mib), 0, 0},
    {"name", F_STR, offsetof(sim_proc, name), 64, 0},
    {NULL, F_U32, 0, 0, 0}};

static int set_field(const field_t *table, void *base, const char *key, const char *val) {
    for (const field_t *f = table; f->key; f++) {
        if (strcmp(f->key, key) != 0) continue;
        char *p = (char *)base + f->off;
        switch (f->type) {
        case F_STR:
            snprintf(p, f->size, "%s", val);
            return 0;
        case F_U32:
            *(unsigned int *)p = (unsigned int)strtoul(val, NULL, 0);
            return 0;
        case F_I32:
            *(int *)p = (int)strtol(val, NULL, 0);
            return 0;
        case F_U64:
            *(unsigned long long *)p = strtoull(val, NULL, 0);
            return 0;
        case F_DBL:
            *(double *)p = strtod(val, NULL);
            return 0;
        case F_CTR: {
            counter_t *c = (counter_t *)p;
            char *end = NULL;
            c->base = strtod(val, &end);
            c->rate = (end && *end) ? strtod(end, NULL) : 0.0;
            return 0;
        }
        case F_HEX16: {
            unsigned char *u = (unsigned char *)p;
            size_t n = 0;
            for (const char *s = val; *s && n < 16;) {
                if (!isxdigit((unsigned char)s[0]) || !isxdigit((unsigned char)s[1])) {
                    s++;
                    continue;
                }
                char hex[3] = {s[0], s[1], 0};
                u[n++] = (unsigned char)strtoul(hex, NULL, 16);
                s += 2;
            }
            return 0;
        }
        case F_U64S: {
            unsigned long long *arr = (unsigned long long *)p;
            unsigned int *cnt = (unsigned int *)((char *)base + f->count_off);
            *cnt = 0;
            const char *s = val;
            while (*s && *cnt < f->size) {
                char *end = NULL;
                unsigned long long v = strtoull(s, &end, 0);
                if (end == s) break;
                arr[(*cnt)++] = v;
                s = end;
                while (*s == ',' || *s == ' ') s++;
            }
            return 0;
        }
        }
    }
    return -1;
}

static void rstrip(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ')) s[--n] = 0;
}

static int load_state(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/state", g_sys.dir);
    FILE *fp = fopen(path, "r");
    if (!fp) {
        fprintf(stderr, "nodegate-sim: cannot open %s: %s\n", path, strerror(errno));
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    memset(g_gpus, 0, sizeof g_gpus);
    g_sys.count = 0;
    sim_gpu *cur = NULL;
    int in_system = 0;
    char line[8192];
    unsigned int lineno = 0;
    int rc = NVML_SUCCESS;
    while (fgets(line, sizeof line, fp)) {
        lineno++;
        rstrip(line);
        if (!line[0] || line[0] == '#') continue;
        if (line[0] == '[') {
            unsigned int idx;
            in_system = strcmp(line, "[system]") == 0;
            cur = NULL;
            if (!in_system) {
                if (sscanf(line, "[gpu %u]", &idx) != 1 || idx >= MAX_GPUS) {
                    fprintf(stderr, "nodegate-sim: %s:%u: bad section %s\n", path, lineno, line);
                    rc = NVML_ERROR_UNKNOWN;
                    break;
                }
                cur = &g_gpus[idx];
                cur->index = idx;
                if (idx + 1 > g_sys.count) g_sys.count = idx + 1;
            }
            continue;
        }
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = 0;
        const char *key = line, *val = eq + 1;
        int bad = 0;
        if (in_system) {
            if (!strcmp(key, "driver")) snprintf(g_sys.driver, sizeof g_sys.driver, "%s", val);
            else if (!strcmp(key, "nvml")) snprintf(g_sys.nvml, sizeof g_sys.nvml, "%s", val);
            else if (!strcmp(key, "cuda")) g_sys.cuda = atoi(val);
            else if (!strcmp(key, "epoch")) g_sys.epoch = strtod(val, NULL);
            else bad = 1;
        } else if (cur) {
            unsigned int sub;
            int consumed = 0;
            if (sscanf(key, "link.%u.%n", &sub, &consumed) == 1 && consumed > 0) {
                bad = sub >= MAX_LINKS ||
                      set_field(link_fields, &cur->links[sub], key + consumed, val) != 0;
            } else if (strncmp(key, "nvml_error.", 11) == 0) {
                bad = cur->n_injected >= MAX_INJECTED || !key[11] || strlen(key + 11) >= 96;
                if (!bad) {
                    snprintf(cur->injected[cur->n_injected].fn, 96, "%s", key + 11);
                    cur->injected[cur->n_injected++].code = (nvmlReturn_t)strtol(val, NULL, 0);
                }
            } else if (sscanf(key, "proc.%u.%n", &sub, &consumed) == 1 && consumed > 0) {
                bad = sub >= MAX_PROCS ||
                      set_field(proc_fields, &cur->procs[sub], key + consumed, val) != 0;
                if (!bad && sub + 1 > cur->n_procs) cur->n_procs = sub + 1;
            } else {
                bad = set_field(gpu_fields, cur, key, val) != 0;
            }
        } else {
            bad = 1;
        }
        if (bad) {
            fprintf(stderr, "nodegate-sim: %s:%u: unknown key %s\n", path, lineno, key);
            rc = NVML_ERROR_UNKNOWN;
            break;
        }
    }
    fclose(fp);
    return rc;
}

/* ------------------------------------------------------------------ telemetry model */

static double now_s(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

typedef struct {
    double temp, mem_temp, power, energy_mj, util;
} telemetry_t;

static double clampd(double v, double lo, double hi) { return v < lo ? lo : (v > hi ? hi : v); }

static double power_target(const sim_gpu *g, double pct) {
    double p = g->power_idle + (g->power_load - g->power_idle) * pct / 100.0;
    if (g->power_cap > 0 && p > g->power_cap) p = g->power_cap;
    if (p > g->power_limit && g->power_limit > 0) p = g->power_limit;
    return p;
}

/* Requested power before the enforced limit: above the limit means a SW power cap. */
static double power_demand(const sim_gpu *g, double pct) {
    return g->power_idle + (g->power_load - g->power_idle) * pct / 100.0;
}

/*
 * First-order response through the piecewise-constant load history: within a segment each
 * quantity relaxes toward its target with time constant tau, and energy is the exact
 * integral of that exponential. Stateless, so every process computes the same answer.
 */
static telemetry_t telemetry(const sim_gpu *g) {
    telemetry_t t;
    double tau = g->tau_s > 0.05 ? g->tau_s : 2.0;
    double ptau = tau / 3.0;
    double now = now_s();
    double start = g_sys.epoch > 0 && g_sys.epoch < now ? g_sys.epoch : now;
    t.temp = g->temp_idle;
    t.mem_temp = g->mem_temp_idle;
    t.power = g->power_idle;
    t.energy_mj = g->energy0_mj;
    t.util = 0;

    static double seg_t[MAX_SEGMENTS], seg_p[MAX_SEGMENTS];
    int n = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/load/%u", g_sys.dir, g->index);
    FILE *fp = fopen(path, "r");
    if (fp) {
        double ts, pct;
        while (n < MAX_SEGMENTS && fscanf(fp, "%lf %lf", &ts, &pct) == 2) {
            if (ts < start) ts = start;
            if (ts > now) ts = now;
            seg_t[n] = ts;
            seg_p[n] = clampd(pct, 0, 100);
            n++;
        }
        fclose(fp);
    }
    double cur_t = start, cur_p = 0;
    for (int i = 0; i <= n; i++) {
        double end = i < n ? seg_t[i] : now;
        double dt = end - cur_t;
        if (dt > 0) {
            double tt = g->temp_idle + (g->temp_load - g->temp_idle) * cur_p / 100.0;
            double tm = g->mem_temp_idle + (g->mem_temp_load - g->mem_temp_idle) * cur_p / 100.0;
            double tp = power_target(g, cur_p);
            double ep = exp(-dt / ptau);
            t.energy_mj += tp * dt + (t.power - tp) * ptau * (1.0 - ep);
            t.power = tp + (t.power - tp) * ep;
            t.temp = tt + (t.temp - tt) * exp(-dt / tau);
            t.mem_temp = tm + (t.mem_temp - tm) * exp(-dt / tau);
        }
        if (i < n) {
            cur_t = end > cur_t ? end : cur_t;
            cur_p = seg_p[i];
        }
    }
    t.util = cur_p;
    return t;
}

static double counter_value(const counter_t *c) {
    double dt = now_s() - g_sys.epoch;
    if (dt < 0 || g_sys.epoch <= 0) dt = 0;
    return floor(c->base + c->rate * dt);
}

static unsigned int util_now(const sim_gpu *g, const telemetry_t *t) {
    double u = t->util > g->util_base ? t->util : g->util_base;
    return (unsigned int)u;
}

static unsigned long long reasons_now(const sim_gpu *g, const telemetry_t *t) {
    unsigned long long r = g->static_reasons;
    unsigned int util = util_now(g, t);
    if (t->temp >= g->temp_slowdown && g->temp_slowdown > 0) r |= REASON_HW_THERMAL | REASON_HW_SLOWDOWN;
    if (util > 0 && power_demand(g, t->util) > g->power_limit && g->power_limit > 0)
        r |= REASON_SW_POWER_CAP;
    if (util == 0 && g->n_procs == 0 && r == 0) r |= REASON_GPU_IDLE;
    return r;
}

/* Current graphics/SM clock: idle when there is no work, boost under load, then capped. */
static unsigned int gr_clock_now(const sim_gpu *g, unsigned int max) {
    telemetry_t t = telemetry(g);
    unsigned int util = util_now(g, &t);
    unsigned long long r = reasons_now(g, &t);
    double clk = util > 0 ? max : g->clk_graphics_idle;
    if (r & REASON_HW_THERMAL) clk = fmin(clk, max * 0.6);
    if (r & REASON_HW_POWER_BRAKE) clk = fmin(clk, max * 0.3);
    if (r & REASON_SW_POWER_CAP) {
        double d = power_demand(g, t.util);
        if (d > 0) clk = fmin(clk, max * (g->power_limit / d));
    }
    if (g->clk_cap > 0 && clk > g->clk_cap) clk = g->clk_cap;
    return (unsigned int)clk;
}

/* ------------------------------------------------------------------ helpers */

#define CHECK_INIT()                                                                   \
    do {                                                                               \
        if (g_sys.refcount <= 0) return NVML_ERROR_UNINITIALIZED;                     \
    } while (0)

/* A wedged GPU: the driver call never returns. Real NVML has no return code for this; the
 * caller's thread simply stays blocked (in the kernel, on real hardware). pause() only
 * returns for a caught signal, so the loop keeps it blocked; SIGKILL still ends the process. */
static void wedge(void) {
    for (;;) pause();
}

/* The scenario's injected return code for function fn on this GPU: an entry names the
 * function or its unversioned name (nvmlDeviceGetComputeRunningProcesses covers _v3). */
static nvmlReturn_t injected(const sim_gpu *g, const char *fn) {
    for (unsigned int i = 0; i < g->n_injected; i++) {
        size_t n = strlen(g->injected[i].fn);
        if (strncmp(fn, g->injected[i].fn, n) == 0 &&
            (fn[n] == 0 || (fn[n] == '_' && fn[n + 1] == 'v' && isdigit((unsigned char)fn[n + 2]))))
            return g->injected[i].code;
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t get_gpu(void *handle, sim_gpu **out, const char *fn) {
    if (g_sys.refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    sim_gpu *g = (sim_gpu *)handle;
    if (!g || g < g_gpus || g >= g_gpus + g_sys.count) return NVML_ERROR_INVALID_ARGUMENT;
    if (((char *)g - (char *)g_gpus) % sizeof(sim_gpu) != 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->lost) return NVML_ERROR_GPU_IS_LOST;
    if (g->hang) wedge();
    nvmlReturn_t forced = injected(g, fn);
    if (forced != NVML_SUCCESS) return forced;
    *out = g;
    return NVML_SUCCESS;
}

#define GPU_OR_RETURN(handle)                                                          \
    sim_gpu *g;                                                                        \
    do {                                                                               \
        nvmlReturn_t rc_ = get_gpu((handle), &g, __func__);                            \
        if (rc_ != NVML_SUCCESS) return rc_;                                           \
    } while (0)

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* "0000:18:00.0" and "00000000:18:00.0" name the same device. */
static int parse_bus_id(const char *s, unsigned int *dom, unsigned int *bus, unsigned int *dev,
                        unsigned int *fn) {
    *fn = 0;
    int n = sscanf(s, "%x:%x:%x.%x", dom, bus, dev, fn);
    if (n >= 3) return 0;
    *dom = 0;
    n = sscanf(s, "%x:%x.%x", bus, dev, fn);
    return n >= 2 ? 0 : -1;
}

static void fill_pci(nvmlPciInfo_t *p, unsigned int dom, unsigned int bus, unsigned int dev,
                     unsigned int fn, unsigned int devid, unsigned int subsys) {
    memset(p, 0, sizeof *p);
    p->domain = dom;
    p->bus = bus;
    p->device = dev;
    p->pciDeviceId = devid;
    p->pciSubSystemId = subsys;
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%04X:%02X:%02X.%X", dom & 0xFFFF, bus, dev,
             fn);
    snprintf(p->busId, sizeof p->busId, "%08X:%02X:%02X.%X", dom, bus, dev, fn);
}

static nvmlReturn_t get_link(sim_gpu *g, unsigned int link, sim_link **out) {
    if (g->nvlink_count == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= g->nvlink_count) return NVML_ERROR_INVALID_ARGUMENT;
    *out = &g->links[link];
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ init / system */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    if (g_sys.refcount > 0) {
        g_sys.refcount++;
        return NVML_SUCCESS;
    }
    const char *dir = getenv("NODEGATE_SIM_DIR");
    if (!dir || !*dir) {
        fprintf(stderr, "nodegate-sim: NODEGATE_SIM_DIR is not set\n");
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    snprintf(g_sys.dir, sizeof g_sys.dir, "%s", dir);
    nvmlReturn_t rc = load_state();
    if (rc != NVML_SUCCESS) return rc;
    g_sys.refcount = 1;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    CHECK_INIT();
    g_sys.refcount--;
    return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt request issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    /* the text nvidia-smi -q prints for deprecated queries (application clocks, display
     * mode) in the public captures of tests/sim/data/corpus */
    case NVML_ERROR_DEPRECATED: return "Requested functionality has been deprecated";
    case NVML_ERROR_NOT_READY: return "Not Ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    default: return "Unknown Error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    CHECK_INIT();
    return copy_str(version, length, g_sys.driver);
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    CHECK_INIT();
    return copy_str(version, length, g_sys.nvml);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = g_sys.cuda;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) {
    return nvmlSystemGetCudaDriverVersion(v);
}

EXPORT nvmlReturn_t nvmlSystemGetDriverBranch(nvmlSystemDriverBranchInfo_v1_t *info,
                                              unsigned int length) {
    CHECK_INIT();
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlSystemDriverBranchInfo_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    (void)length;
    /* "570.133.20" -> "r570_00", the shape the real driver reports */
    int major = atoi(g_sys.driver);
    snprintf(info->branch, sizeof info->branch, "r%d_00", major);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
    CHECK_INIT();
    if (!name || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < g_sys.count; i++)
        for (unsigned int k = 0; k < g_gpus[i].n_procs; k++)
            if (g_gpus[i].procs[k].pid == pid) {
                snprintf(name, length, "%s", g_gpus[i].procs[k].name);
                return NVML_SUCCESS;
            }
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/comm", pid);
    FILE *fp = fopen(path, "r");
    if (!fp) return NVML_ERROR_NOT_FOUND;
    char buf[256] = {0};
    if (!fgets(buf, sizeof buf, fp)) buf[0] = 0;
    fclose(fp);
    rstrip(buf);
    snprintf(name, length, "%s", buf);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ enumeration */

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    CHECK_INIT();
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = g_sys.count;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    CHECK_INIT();
    if (!device || index >= g_sys.count) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &g_gpus[index];
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, void **device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, void **device) {
    CHECK_INIT();
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < g_sys.count; i++)
        if (strcasecmp(g_gpus[i].uuid, uuid) == 0) {
            *device = &g_gpus[i];
            return g_gpus[i].lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, void **device) {
    CHECK_INIT();
    if (!serial || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < g_sys.count; i++)
        if (strcmp(g_gpus[i].serial, serial) == 0) {
            *device = &g_gpus[i];
            return g_gpus[i].lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, void **device) {
    CHECK_INIT();
    if (!bus_id || !device) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int d, b, v, f;
    if (parse_bus_id(bus_id, &d, &b, &v, &f) != 0) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < g_sys.count; i++) {
        sim_gpu *g = &g_gpus[i];
        if (g->domain == d && g->bus == b && g->device == v && g->function == f) {
            *device = g;
            return g->lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *bus_id, void **device) {
    return nvmlDeviceGetHandleByPciBusId_v2(bus_id, device);
}

/* ------------------------------------------------------------------ identity */

EXPORT nvmlReturn_t nvmlDeviceGetIndex(void *h, unsigned int *index) {
    GPU_OR_RETURN(h);
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = g->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(void *h, char *name, unsigned int length) {
    GPU_OR_RETURN(h);
    return copy_str(name, length, g->name);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(void *h, char *uuid, unsigned int length) {
    GPU_OR_RETURN(h);
    return copy_str(uuid, length, g->uuid);
}

EXPORT nvmlReturn_t nvmlDeviceGetSerial(void *h, char *serial, unsigned int length) {
    GPU_OR_RETURN(h);
    /* nvml.h: "For all products with an inforom"; a board without one has no serial */
    if (!g->serial[0]) return NVML_ERROR_NOT_SUPPORTED;
    return copy_str(serial, length, g->serial);
}

EXPORT nvmlReturn_t nvmlDeviceGetBoardPartNumber(void *h, char *pn, unsigned int length) {
    GPU_OR_RETURN(h);
    if (!g->part_number[0]) return NVML_ERROR_NOT_SUPPORTED;
    return copy_str(pn, length, g->part_number);
}

EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(void *h, char *v, unsigned int length) {
    GPU_OR_RETURN(h);
    return copy_str(v, length, g->vbios);
}

EXPORT nvmlReturn_t nvmlDeviceGetInforomImageVersion(void *h, char *v, unsigned int length) {
    GPU_OR_RETURN(h);
    if (!g->inforom_image[0]) return NVML_ERROR_NOT_SUPPORTED;
    return copy_str(v, length, g->inforom_image);
}

EXPORT nvmlReturn_t nvmlDeviceGetInforomVersion(void *h, int object, char *v, unsigned int length) {
    GPU_OR_RETURN(h);
    const char *s;
    switch (object) {
    case 0: s = g->inforom_oem; break;
    case 1: s = g->inforom_ecc; break;
    case 2: s = g->inforom_power; break;
    case 3: s = ""; break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!s[0]) return NVML_ERROR_NOT_SUPPORTED;
    return copy_str(v, length, s);
}

EXPORT nvmlReturn_t nvmlDeviceValidateInforom(void *h) {
    /* nvml.h: reads the InfoROM from flash and verifies its checksums;
     * NVML_ERROR_CORRUPTED_INFOROM when they do not match */
    GPU_OR_RETURN(h);
    return g->inforom_corrupted ? NVML_ERROR_CORRUPTED_INFOROM : NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(void *h, nvmlPciInfo_t *pci) {
    GPU_OR_RETURN(h);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    fill_pci(pci, g->domain, g->bus, g->device, g->function, g->pci_device_id,
             g->pci_subsystem_id);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(void *h, nvmlPciInfo_t *pci) {
    return nvmlDeviceGetPciInfo_v3(h, pci);
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(void *h, nvmlPciInfo_t *pci) {
    return nvmlDeviceGetPciInfo_v3(h, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfoExt(void *h, nvmlPciInfoExt_v1_t *pci) {
    GPU_OR_RETURN(h);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    if (pci->version != nvmlPciInfoExt_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    pci->domain = g->domain;
    pci->bus = g->bus;
    pci->device = g->device;
    pci->pciDeviceId = g->pci_device_id;
    pci->pciSubSystemId = g->pci_subsystem_id;
    pci->baseClass = 0x03; /* display controller */
    pci->subClass = 0x02;  /* 3D controller */
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", g->domain, g->bus, g->device,
             g->function);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(void *h, unsigned int *v) {
    GPU_OR_RETURN(h);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = g->minor_number;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetModuleId(void *h, unsigned int *v) {
    GPU_OR_RETURN(h);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = g->module_id;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetBoardId(void *h, unsigned int *v) {
    GPU_OR_RETURN(h);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = g->board_id;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMultiGpuBoard(void *h, unsigned int *v) {
    GPU_OR_RETURN(h);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = 0;
    (void)g;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(void *h, unsigned int *arch) {
    GPU_OR_RETURN(h);
    if (!arch) return NVML_ERROR_INVALID_ARGUMENT;
    *arch = g->architecture;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(void *h, int *major, int *minor) {
    GPU_OR_RETURN(h);
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = (int)g->cc_major;
    *minor = (int)g->cc_minor;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetBrand(void *h, unsigned int *brand) {
    GPU_OR_RETURN(h);
    if (!brand) return NVML_ERROR_INVALID_ARGUMENT;
    *brand = g->brand;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(void *h, unsigned int *node) {
    GPU_OR_RETURN(h);
    if (!node) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->numa_node < 0) return NVML_ERROR_NOT_SUPPORTED;
    *node = (unsigned int)g->numa_node;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNumGpuCores(void *h, unsigned int *v) {
    GPU_OR_RETURN(h);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->num_cores) return NVML_ERROR_NOT_SUPPORTED;
    *v = g->num_cores;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryBusWidth(void *h, unsigned int *v) {
    GPU_OR_RETURN(h);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->mem_bus_width) return NVML_ERROR_NOT_SUPPORTED;
    *v = g->mem_bus_width;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(void *h, unsigned int *v) {
    GPU_OR_RETURN(h);
    (void)g;
    (void)v;
    return NVML_ERROR_NOT_SUPPORTED; /* SXM modules have no fan of their own */
}

EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed_v2(void *h, unsigned int fan, unsigned int *v) {
    (void)fan;
    return nvmlDeviceGetFanSpeed(h, v);
}

EXPORT nvmlReturn_t nvmlDeviceGetNumFans(void *h, unsigned int *v) {
    GPU_OR_RETURN(h);
    (void)g;
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDisplayMode(void *h, unsigned int *v) {
    GPU_OR_RETURN(h);
    (void)g;
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDisplayActive(void *h, unsigned int *v) {
    return nvmlDeviceGetDisplayMode(h, v);
}

/* ------------------------------------------------------------------ memory */

static unsigned long long used_mib(const sim_gpu *g) {
    unsigned long long u = g->mem_used_mib;
    for (unsigned int k = 0; k < g->n_procs; k++) u += g->procs[k].used_mib;
    return u;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(void *h, nvmlMemory_t *m) {
    GPU_OR_RETURN(h);
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    const unsigned long long mib = 1024ULL * 1024ULL;
    unsigned long long used = (used_mib(g) + g->mem_reserved_mib) * mib;
    m->total = g->mem_total_mib * mib;
    m->used = used;
    m->free = m->total > used ? m->total - used : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(void *h, nvmlMemory_v2_t *m) {
    GPU_OR_RETURN(h);
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const unsigned long long mib = 1024ULL * 1024ULL;
    m->total = g->mem_total_mib * mib;
    m->reserved = g->mem_reserved_mib * mib;
    m->used = used_mib(g) * mib;
    unsigned long long taken = m->reserved + m->used;
    m->free = m->total > taken ? m->total - taken : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(void *h, nvmlBAR1Memory_t *m) {
    GPU_OR_RETURN(h);
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    const unsigned long long mib = 1024ULL * 1024ULL;
    m->bar1Total = g->bar1_mib * mib;
    m->bar1Used = 2ULL * mib;
    m->bar1Free = m->bar1Total > m->bar1Used ? m->bar1Total - m->bar1Used : 0;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ thermal and power */

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(void *h, unsigned int sensor, unsigned int *temp) {
    GPU_OR_RETURN(h);
    if (!temp || sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    telemetry_t t = telemetry(g);
    *temp = (unsigned int)lround(t.temp);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(void *h, nvmlTemperature_v1_t *t) {
    if (!t) return NVML_ERROR_INVALID_ARGUMENT;
    if (t->version != nvmlTemperature_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned int v = 0;
    nvmlReturn_t rc = nvmlDeviceGetTemperature(h, t->sensorType, &v);
    if (rc == NVML_SUCCESS) t->temperature = (int)v;
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureThreshold(void *h, unsigned int which,
                                                      unsigned int *temp) {
    GPU_OR_RETURN(h);
    if (!temp) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int v;
    switch (which) {
    case 0: v = g->temp_shutdown; break;
    case 1: v = g->temp_slowdown; break;
    case 2: v = g->temp_mem_max; break;
    case 3: v = g->temp_gpu_max; break;
    case 4: case 5: case 6: case 7: return NVML_ERROR_NOT_SUPPORTED;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    *temp = v;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(void *h, unsigned int *mw) {
    GPU_OR_RETURN(h);
    if (!mw) return NVML_ERROR_INVALID_ARGUMENT;
    telemetry_t t = telemetry(g);
    *mw = (unsigned int)lround(t.power);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(void *h, unsigned long long *mj) {
    GPU_OR_RETURN(h);
    if (!mj) return NVML_ERROR_INVALID_ARGUMENT;
    telemetry_t t = telemetry(g);
    *mj = (unsigned long long)llround(t.energy_mj);
    return NVML_SUCCESS;
}

#define SIMPLE_U32_GETTER(fname, member)                                               \
    EXPORT nvmlReturn_t fname(void *h, unsigned int *v) {                              \
        GPU_OR_RETURN(h);                                                              \
        if (!v) return NVML_ERROR_INVALID_ARGUMENT;                                    \
        *v = g->member;                                                                \
        return NVML_SUCCESS;                                                           \
    }

SIMPLE_U32_GETTER(nvmlDeviceGetPowerManagementLimit, power_limit)
SIMPLE_U32_GETTER(nvmlDeviceGetEnforcedPowerLimit, power_limit)
SIMPLE_U32_GETTER(nvmlDeviceGetPowerManagementDefaultLimit, power_default_limit)
SIMPLE_U32_GETTER(nvmlDeviceGetCurrPcieLinkWidth, pcie_width)
SIMPLE_U32_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, pcie_max_gen)
SIMPLE_U32_GETTER(nvmlDeviceGetMaxPcieLinkWidth, pcie_max_width)
SIMPLE_U32_GETTER(nvmlDeviceGetGpuMaxPcieLinkGeneration, pcie_gpu_max_gen)
SIMPLE_U32_GETTER(nvmlDeviceGetPersistenceMode, persistence)
SIMPLE_U32_GETTER(nvmlDeviceGetComputeMode, compute_mode)

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(void *h, unsigned int *lo,
                                                                 unsigned int *hi) {
    GPU_OR_RETURN(h);
    if (!lo || !hi) return NVML_ERROR_INVALID_ARGUMENT;
    *lo = g->power_min_limit;
    *hi = g->power_max_limit;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementMode(void *h, unsigned int *mode) {
    GPU_OR_RETURN(h);
    (void)g;
    if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = 1;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(void *h, unsigned int *p) {
    GPU_OR_RETURN(h);
    (void)g;
    if (!p) return NVML_ERROR_INVALID_ARGUMENT;
    *p = 0; /* P0: data-centre parts in persistence mode stay in P0 */
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetPowerState(void *h, unsigned int *p) {
    return nvmlDeviceGetPerformanceState(h, p);
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(void *h, nvmlUtilization_t *u) {
    GPU_OR_RETURN(h);
    if (!u) return NVML_ERROR_INVALID_ARGUMENT;
    telemetry_t t = telemetry(g);
    u->gpu = util_now(g, &t);
    u->memory = u->gpu / 2;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ clocks */

static nvmlReturn_t clock_now(sim_gpu *g, unsigned int type, unsigned int *v) {
    switch (type) {
    case 0: *v = gr_clock_now(g, g->clk_graphics_max); return NVML_SUCCESS;
    case 1: *v = gr_clock_now(g, g->clk_sm_max); return NVML_SUCCESS;
    case 2: *v = g->clk_mem_max; return NVML_SUCCESS;
    case 3: {
        telemetry_t t = telemetry(g);
        *v = util_now(g, &t) > 0 ? g->clk_video_max : g->clk_video_idle;
        return NVML_SUCCESS;
    }
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
}

static nvmlReturn_t clock_max(sim_gpu *g, unsigned int type, unsigned int *v) {
    switch (type) {
    case 0: *v = g->clk_graphics_max; return NVML_SUCCESS;
    case 1: *v = g->clk_sm_max; return NVML_SUCCESS;
    case 2: *v = g->clk_mem_max; return NVML_SUCCESS;
    case 3: *v = g->clk_video_max; return NVML_SUCCESS;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
}

static nvmlReturn_t clock_app(sim_gpu *g, unsigned int type, int dflt, unsigned int *v) {
    switch (type) {
    case 0:
    case 1: *v = dflt ? g->clk_default_app_graphics : g->clk_app_graphics; return NVML_SUCCESS;
    case 2: *v = dflt ? g->clk_default_app_mem : g->clk_app_mem; return NVML_SUCCESS;
    case 3: *v = g->clk_video_max; return NVML_SUCCESS;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(void *h, unsigned int type, unsigned int *v) {
    GPU_OR_RETURN(h);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    return clock_now(g, type, v);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(void *h, unsigned int type, unsigned int *v) {
    GPU_OR_RETURN(h);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    return clock_max(g, type, v);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxCustomerBoostClock(void *h, unsigned int type,
                                                       unsigned int *v) {
    return nvmlDeviceGetMaxClockInfo(h, type, v);
}

EXPORT nvmlReturn_t nvmlDeviceGetApplicationsClock(void *h, unsigned int type, unsigned int *v) {
    GPU_OR_RETURN(h);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    return clock_app(g, type, 0, v);
}

EXPORT nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(void *h, unsigned int type,
                                                          unsigned int *v) {
    GPU_OR_RETURN(h);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    return clock_app(g, type, 1, v);
}

EXPORT nvmlReturn_t nvmlDeviceGetClock(void *h, unsigned int type, unsigned int id,
                                       unsigned int *v) {
    GPU_OR_RETURN(h);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    switch (id) {
    case 0: return clock_now(g, type, v);
    case 1: return clock_app(g, type, 0, v);
    case 2: return clock_app(g, type, 1, v);
    case 3: return clock_max(g, type, v);
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(void *h, unsigned long long *r) {
    GPU_OR_RETURN(h);
    if (!r) return NVML_ERROR_INVALID_ARGUMENT;
    telemetry_t t = telemetry(g);
    *r = reasons_now(g, &t);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(void *h, unsigned long long *r) {
    return nvmlDeviceGetCurrentClocksEventReasons(h, r);
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(void *h, unsigned long long *r) {
    GPU_OR_RETURN(h);
    (void)g;
    if (!r) return NVML_ERROR_INVALID_ARGUMENT;
    *r = REASON_SUPPORTED;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(void *h, unsigned long long *r) {
    return nvmlDeviceGetSupportedClocksEventReasons(h, r);
}

EXPORT nvmlReturn_t nvmlDeviceGetAutoBoostedClocksEnabled(void *h, unsigned int *on,
                                                          unsigned int *dflt) {
    GPU_OR_RETURN(h);
    (void)g;
    (void)on;
    (void)dflt;
    return NVML_ERROR_NOT_SUPPORTED; /* as on every data-centre part */
}

/* ------------------------------------------------------------------ PCIe */

EXPORT nvmlReturn_t nvmlDeviceGetPcieReplayCounter(void *h, unsigned int *v) {
    GPU_OR_RETURN(h);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = (unsigned int)counter_value(&g->pcie_replay);
    return NVML_SUCCESS;
}

/*
 * Current link generation. nvml.h: it "may be reduced when the GPU is not in use": an idle
 * GPU trains its link down (Gen1 on real H100s) and back up when work arrives, never above
 * the link's max. A state without pcie_idle_gen keeps the busy generation.
 */
static unsigned int pcie_gen_now(const sim_gpu *g) {
    telemetry_t t = telemetry(g);
    unsigned int busy = g->pcie_max_gen && g->pcie_gen > g->pcie_max_gen ? g->pcie_max_gen
                                                                        : g->pcie_gen;
    if (util_now(g, &t) > 0 || g->pcie_idle_gen == 0) return busy;
    return g->pcie_idle_gen < busy ? g->pcie_idle_gen : busy;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(void *h, unsigned int *v) {
    GPU_OR_RETURN(h);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = pcie_gen_now(g);
    return NVML_SUCCESS;
}

static unsigned int gen_speed_mbps(unsigned int gen) {
    static const unsigned int s[] = {0, 2500, 5000, 8000, 16000, 32000, 64000};
    return gen < 7 ? s[gen] : 0;
}

EXPORT nvmlReturn_t nvmlDeviceGetPcieLinkMaxSpeed(void *h, unsigned int *v) {
    GPU_OR_RETURN(h);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = g->pcie_max_gen <= 6 ? g->pcie_max_gen : 0; /* nvmlPcieLinkMaxSpeed_t enum */
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPcieSpeed(void *h, unsigned int *v) {
    GPU_OR_RETURN(h);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = gen_speed_mbps(pcie_gen_now(g));
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(void *h, unsigned int counter, unsigned int *v) {
    GPU_OR_RETURN(h);
    if (!v || counter > 1) return NVML_ERROR_INVALID_ARGUMENT;
    telemetry_t t = telemetry(g);
    *v = (unsigned int)(t.util * 100.0); /* KB/s */
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ ECC, remap, retirement */

EXPORT nvmlReturn_t nvmlDeviceGetEccMode(void *h, unsigned int *cur, unsigned int *pending) {
    GPU_OR_RETURN(h);
    if (!cur || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    *cur = g->ecc_current;
    *pending = g->ecc_pending;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDefaultEccMode(void *h, unsigned int *dflt) {
    GPU_OR_RETURN(h);
    if (!dflt) return NVML_ERROR_INVALID_ARGUMENT;
    *dflt = g->ecc_default;
    return NVML_SUCCESS;
}

static nvmlReturn_t ecc_total(sim_gpu *g, unsigned int etype, unsigned int ctype,
                              unsigned long long *v) {
    if (etype > 1 || ctype > 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->ecc_current) return NVML_ERROR_NOT_SUPPORTED;
    const counter_t *c = etype == 0 ? (ctype == 0 ? &g->sbe_vol : &g->sbe_agg)
                                    : (ctype == 0 ? &g->dbe_vol : &g->dbe_agg);
    *v = (unsigned long long)counter_value(c);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(void *h, unsigned int etype, unsigned int ctype,
                                                unsigned long long *v) {
    GPU_OR_RETURN(h);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    return ecc_total(g, etype, ctype, v);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(void *h, unsigned int etype,
                                                    unsigned int ctype, unsigned int loc,
                                                    unsigned long long *v) {
    GPU_OR_RETURN(h);
    if (!v || loc >= 8) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long total;
    nvmlReturn_t rc = ecc_total(g, etype, ctype, &total);
    if (rc != NVML_SUCCESS) return rc;
    if (loc >= 4 && loc <= 6) return NVML_ERROR_NOT_SUPPORTED; /* texture, shm, CBU */
    *v = loc == 2 ? total : 0; /* every simulated error sits in device memory (HBM) */
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDetailedEccErrors(void *h, unsigned int etype,
                                                   unsigned int ctype, nvmlEccErrorCounts_t *c) {
    GPU_OR_RETURN(h);
    if (!c) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long total;
    nvmlReturn_t rc = ecc_total(g, etype, ctype, &total);
    if (rc != NVML_SUCCESS) return rc;
    memset(c, 0, sizeof *c);
    c->deviceMemory = total;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(void *h, unsigned int *corr, unsigned int *unc,
                                              unsigned int *pending, unsigned int *failure) {
    GPU_OR_RETURN(h);
    if (!corr || !unc || !pending || !failure) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->architecture < 7) return NVML_ERROR_NOT_SUPPORTED; /* row remapping: Ampere+ */
    *corr = g->remap_corr;
    *unc = g->remap_unc;
    *pending = g->remap_pending;
    *failure = g->remap_failure;
    return NVML_SUCCESS;
}

/* Page retirement: nvml.h documents it "for Kepler or newer", but Ampere and later replaced it
 * with row remapping and the driver answers NOT_SUPPORTED there: seen through nvidia-ml-py on a
 * real H200 (driver 580.159.04, 2026-12-04, docs/hardware-runs/), and shown as N/A by every
 * Ampere/Hopper/Blackwell capture in tests/sim/data/corpus (A100-SXM4 among them). */
#define PAGE_RETIREMENT_SUPPORTED(g) ((g)->architecture < 7)

static nvmlReturn_t retired(sim_gpu *g, unsigned int cause, unsigned int *count,
                            unsigned long long *addrs, unsigned long long *times) {
    if (!count || cause > 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (!PAGE_RETIREMENT_SUPPORTED(g)) return NVML_ERROR_NOT_SUPPORTED;
    const unsigned long long *src = cause == 0 ? g->retired_sbe : g->retired_dbe;
    unsigned int n = cause == 0 ? g->n_retired_sbe : g->n_retired_dbe;
    if (*count < n || (!addrs && n > 0)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        addrs[i] = src[i];
        if (times) times[i] = (unsigned long long)g_sys.epoch - 3600ULL * (n - i);
    }
    *count = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(void *h, unsigned int cause, unsigned int *count,
                                              unsigned long long *addrs) {
    GPU_OR_RETURN(h);
    return retired(g, cause, count, addrs, NULL);
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages_v2(void *h, unsigned int cause, unsigned int *count,
                                                 unsigned long long *addrs,
                                                 unsigned long long *times) {
    GPU_OR_RETURN(h);
    return retired(g, cause, count, addrs, times);
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(void *h, unsigned int *pending) {
    GPU_OR_RETURN(h);
    if (!pending) return NVML_ERROR_INVALID_ARGUMENT;
    if (!PAGE_RETIREMENT_SUPPORTED(g)) return NVML_ERROR_NOT_SUPPORTED;
    *pending = g->retired_pending;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ NVLink */

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(void *h, unsigned int link, unsigned int *active) {
    GPU_OR_RETURN(h);
    if (!active) return NVML_ERROR_INVALID_ARGUMENT;
    sim_link *l;
    nvmlReturn_t rc = get_link(g, link, &l);
    if (rc != NVML_SUCCESS) return rc;
    *active = l->state;
    return NVML_SUCCESS;
}

/* The state file names an NVLink generation; NVML reports nvml.h's nvmlNvlinkVersion_t, whose
 * values are not generations: NVML_NVLINK_VERSION_INVALID 0, _1_0 1, _2_0 2, _2_2 3, _3_0 4,
 * _3_1 5, _4_0 6, _5_0 7, _6_0 8. A100 reports 3.0, H100/H200 4.0, B200 5.0. */
static unsigned int nvlink_version_enum(unsigned int generation) {
    switch (generation) {
    case 1: return 1; /* NVML_NVLINK_VERSION_1_0 */
    case 2: return 2; /* NVML_NVLINK_VERSION_2_0 */
    case 3: return 4; /* NVML_NVLINK_VERSION_3_0 */
    case 4: return 6; /* NVML_NVLINK_VERSION_4_0 */
    case 5: return 7; /* NVML_NVLINK_VERSION_5_0 */
    case 6: return 8; /* NVML_NVLINK_VERSION_6_0 */
    default: return 0; /* NVML_NVLINK_VERSION_INVALID */
    }
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkVersion(void *h, unsigned int link, unsigned int *v) {
    GPU_OR_RETURN(h);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    sim_link *l;
    nvmlReturn_t rc = get_link(g, link, &l);
    if (rc != NVML_SUCCESS) return rc;
    *v = nvlink_version_enum(l->version);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkCapability(void *h, unsigned int link, unsigned int cap,
                                                  unsigned int *result) {
    GPU_OR_RETURN(h);
    if (!result || cap > 5) return NVML_ERROR_INVALID_ARGUMENT;
    sim_link *l;
    nvmlReturn_t rc = get_link(g, link, &l);
    if (rc != NVML_SUCCESS) return rc;
    /* P2P, atomics and "valid" are set on an HGX board; sysmem access and SLI are not. */
    static const unsigned int caps[6] = {1, 0, 1, 0, 0, 1};
    *result = l->state ? caps[cap] : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(void *h, unsigned int link,
                                                        nvmlPciInfo_t *pci) {
    GPU_OR_RETURN(h);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    sim_link *l;
    nvmlReturn_t rc = get_link(g, link, &l);
    if (rc != NVML_SUCCESS) return rc;
    unsigned int d, b, v, f;
    if (parse_bus_id(l->remote_bus, &d, &b, &v, &f) != 0) return NVML_ERROR_NOT_SUPPORTED;
    fill_pci(pci, d, b, v, f, l->remote_device_id, 0);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(void *h, unsigned int link,
                                                     nvmlPciInfo_t *pci) {
    return nvmlDeviceGetNvLinkRemotePciInfo_v2(h, link, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(void *h, unsigned int link,
                                                        unsigned int *type) {
    GPU_OR_RETURN(h);
    if (!type) return NVML_ERROR_INVALID_ARGUMENT;
    sim_link *l;
    nvmlReturn_t rc = get_link(g, link, &l);
    if (rc != NVML_SUCCESS) return rc;
    *type = l->remote_type;
    return NVML_SUCCESS;
}

static const counter_t *link_counter(const sim_link *l, unsigned int which) {
    switch (which) {
    case 0: return &l->replay;
    case 1: return &l->recovery;
    case 2: return &l->crc_flit;
    case 3: return &l->crc_data;
    case 4: return &l->ecc_data;
    default: return NULL;
    }
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(void *h, unsigned int link,
                                                    unsigned int counter,
                                                    unsigned long long *v) {
    GPU_OR_RETURN(h);
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    sim_link *l;
    nvmlReturn_t rc = get_link(g, link, &l);
    if (rc != NVML_SUCCESS) return rc;
    const counter_t *c = link_counter(l, counter);
    if (!c) return NVML_ERROR_INVALID_ARGUMENT;
    *v = (unsigned long long)counter_value(c);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceResetNvLinkErrorCounters(void *h, unsigned int link) {
    GPU_OR_RETURN(h);
    (void)link;
    (void)g;
    return NVML_ERROR_NO_PERMISSION; /* needs root on a real node */
}

/* ------------------------------------------------------------------ modes and processes */

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(void *h, unsigned int *cur, unsigned int *pending) {
    GPU_OR_RETURN(h);
    if (!cur || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    *cur = g->mig_current;
    *pending = g->mig_pending;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(void *h, unsigned int *is_mig) {
    GPU_OR_RETURN(h);
    (void)g;
    if (!is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = 0;
    return NVML_SUCCESS;
}

static nvmlReturn_t procs(sim_gpu *g, unsigned int *count, nvmlProcessInfo_t *infos, int graphics) {
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = graphics ? 0 : g->n_procs;
    if (*count < n || (n > 0 && !infos)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        infos[i].pid = g->procs[i].pid;
        infos[i].usedGpuMemory = g->procs[i].used_mib * 1024ULL * 1024ULL;
        infos[i].gpuInstanceId = 0xFFFFFFFFu;
        infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    *count = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void *h, unsigned int *count,
                                                            nvmlProcessInfo_t *infos) {
    GPU_OR_RETURN(h);
    return procs(g, count, infos, 0);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(void *h, unsigned int *count,
                                                            nvmlProcessInfo_t *infos) {
    return nvmlDeviceGetComputeRunningProcesses_v3(h, count, infos);
}
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(void *h, unsigned int *count,
                                                             nvmlProcessInfo_t *infos) {
    GPU_OR_RETURN(h);
    return procs(g, count, infos, 1);
}
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(void *h, unsigned int *count,
                                                             nvmlProcessInfo_t *infos) {
    return nvmlDeviceGetGraphicsRunningProcesses_v3(h, count, infos);
}
EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(void *h, unsigned int *count,
                                                               nvmlProcessInfo_t *infos) {
    return nvmlDeviceGetGraphicsRunningProcesses_v3(h, count, infos);
}

/* ------------------------------------------------------------------ fabric */

EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(void *h, nvmlGpuFabricInfo_t *info) {
    GPU_OR_RETURN(h);
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->fabric_supported) return NVML_ERROR_NOT_SUPPORTED;
    memcpy(info->clusterUuid, g->fabric_cluster_uuid, 16);
    info->status = g->fabric_status;
    info->cliqueId = g->fabric_clique;
    info->state = g->fabric_state;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(void *h, nvmlGpuFabricInfo_v3_t *info) {
    GPU_OR_RETURN(h);
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlGpuFabricInfo_v2 && info->version != nvmlGpuFabricInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (!g->fabric_supported) return NVML_ERROR_NOT_SUPPORTED;
    memcpy(info->clusterUuid, g->fabric_cluster_uuid, 16);
    info->status = g->fabric_status;
    info->cliqueId = g->fabric_clique;
    info->state = g->fabric_state;
    info->healthMask = g->fabric_health_mask;
    if (info->version == nvmlGpuFabricInfo_v3) {
        /* healthy when the degraded-bandwidth field (bits 0-1) does not say TRUE (1) */
        info->healthSummary = (g->fabric_health_mask & 0x3u) == 1u ? 3 : 1;
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ topology */

EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(void *h1, void *h2, unsigned int *level) {
    sim_gpu *a, *b;
    nvmlReturn_t rc = get_gpu(h1, &a, __func__);
    if (rc != NVML_SUCCESS) return rc;
    rc = get_gpu(h2, &b, __func__);
    if (rc != NVML_SUCCESS) return rc;
    if (!level) return NVML_ERROR_INVALID_ARGUMENT;
    if (a == b) *level = 0;
    else if (a->numa_node == b->numa_node) *level = 40; /* NODE: same CPU socket */
    else *level = 50;                                   /* SYSTEM: across the SMP link */
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(void *h1, void *h2, unsigned int index,
                                           unsigned int *status) {
    sim_gpu *a, *b;
    nvmlReturn_t rc = get_gpu(h1, &a, __func__);
    if (rc != NVML_SUCCESS) return rc;
    rc = get_gpu(h2, &b, __func__);
    if (rc != NVML_SUCCESS) return rc;
    if (!status || index > 4) return NVML_ERROR_INVALID_ARGUMENT;
    int nvlink = a->nvlink_count > 0 && b->nvlink_count > 0;
    /* nvmlGpuP2PStatus_t: NVML_P2P_STATUS_OK 0; NVML_P2P_STATUS_NOT_SUPPORTED 5 when asking
     * for NVLink (NVML_P2P_CAPS_INDEX_NVLINK 2) without links (4 is DISABLED_BY_REGKEY) */
    *status = (index == 2 && !nvlink) ? 5 : 0;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ field values */

static void fv_u(nvmlFieldValue_t *f, unsigned long long v, int ull) {
    if (ull) {
        f->valueType = VT_ULL;
        f->value.ullVal = v;
    } else {
        f->valueType = VT_UINT;
        f->value.uiVal = (unsigned int)v;
    }
    f->nvmlReturn = NVML_SUCCESS;
}

/* Per-link error counter fields: ids for links 0-5 and 6-11, as nvml.h numbers them. */
static int link_field(unsigned int id, unsigned int *counter, unsigned int *link, int *total) {
    static const struct { unsigned int lo0, tot, lo6; unsigned int counter; } m[] = {
        {32, 38, 96, 2},   /* CRC flit */
        {39, 45, 102, 3},  /* CRC data */
        {46, 52, 108, 0},  /* replay */
        {53, 59, 114, 1},  /* recovery */
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        *counter = m[i].counter;
        *total = 0;
        if (id >= m[i].lo0 && id < m[i].lo0 + 6) { *link = id - m[i].lo0; return 1; }
        if (id >= m[i].lo6 && id < m[i].lo6 + 6) { *link = id - m[i].lo6 + 6; return 1; }
        if (id == m[i].tot) { *total = 1; *link = 0; return 1; }
    }
    if (id >= 148 && id <= 159) { *counter = 4; *link = id - 148; *total = 0; return 1; }
    if (id == 160) { *counter = 4; *link = 0; *total = 1; return 1; }
    return 0;
}

static void field_value(sim_gpu *g, nvmlFieldValue_t *f) {
    unsigned int id = f->fieldId, scope = f->scopeId;
    unsigned long long v = 0;
    telemetry_t t;
    f->timestamp = (long long)(now_s() * 1e6);
    f->latencyUsec = 0;
    f->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    unsigned int counter = 0, link = 0;
    int total = 0;
    if (link_field(id, &counter, &link, &total) || (id >= 161 && id <= 163)) {
        if (g->nvlink_count == 0) return;
        if (id == 161) { counter = 0; link = scope; total = 0; }
        if (id == 162) { counter = 1; link = scope; total = 0; }
        if (id == 163) { counter = 2; link = scope; total = 0; }
        if (total) {
            double sum = 0;
            for (unsigned int k = 0; k < g->nvlink_count; k++) {
                sum += counter_value(link_counter(&g->links[k], counter));
                if (counter == 2) sum += counter_value(&g->links[k].crc_data);
            }
            fv_u(f, (unsigned long long)sum, 1);
            return;
        }
        if (link >= g->nvlink_count) { f->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT; return; }
        double c = counter_value(link_counter(&g->links[link], counter));
        if (id == 163) c += counter_value(&g->links[link].crc_data);
        fv_u(f, (unsigned long long)c, 1);
        return;
    }
    switch (id) {
    case 1: fv_u(f, g->ecc_current, 0); return;
    case 2: fv_u(f, g->ecc_pending, 0); return;
    case 3: case 4: case 5: case 6: case 11: case 12: case 22: case 23: {
        unsigned int etype = (id == 3 || id == 5 || id == 11 || id == 22) ? 0 : 1;
        unsigned int ctype = (id == 3 || id == 4 || id == 11 || id == 12) ? 0 : 1;
        if (ecc_total(g, etype, ctype, &v) == NVML_SUCCESS) fv_u(f, v, 1);
        return;
    }
    case 29: fv_u(f, g->n_retired_sbe, 1); return;
    case 30: fv_u(f, g->n_retired_dbe, 1); return;
    case 31: fv_u(f, g->retired_pending, 0); return;
    case 92: fv_u(f, g->retired_pending && g->n_retired_sbe, 0); return;
    case 93: fv_u(f, g->retired_pending && g->n_retired_dbe, 0); return;
    case 82: t = telemetry(g); fv_u(f, (unsigned long long)lround(t.mem_temp), 0); return;
    case 83: case 191:
        t = telemetry(g);
        fv_u(f, (unsigned long long)llround(t.energy_mj), 1);
        return;
    case 90: /* NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON */
        if (g->nvlink_count == 0) return;
        fv_u(f, g->links[0].speed_mbps, 0);
        return;
    case 164: /* NVML_FI_DEV_NVLINK_GET_SPEED: MB/s of the link in scopeId */
        if (g->nvlink_count == 0) return;
        if (scope >= g->nvlink_count) { f->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT; return; }
        fv_u(f, g->links[scope].speed_mbps, 0);
        return;
    case 91: fv_u(f, g->nvlink_count, 0); return;
    case 94: fv_u(f, (unsigned long long)counter_value(&g->pcie_replay), 0); return;
    case 95: fv_u(f, 0, 0); return;
    case 142: if (g->architecture >= 7) fv_u(f, g->remap_corr, 0); return;
    case 143: if (g->architecture >= 7) fv_u(f, g->remap_unc, 0); return;
    case 144: if (g->architecture >= 7) fv_u(f, g->remap_pending, 0); return;
    case 145: if (g->architecture >= 7) fv_u(f, g->remap_failure, 0); return;
    case 147: {
        unsigned int n = 0;
        for (unsigned int k = 0; k < g->nvlink_count; k++)
            n += g->links[k].state && g->links[k].remote_type == 2;
        if (g->nvlink_count) fv_u(f, n, 0);
        return;
    }
    case 165:
        if (g->nvlink_count == 0) return;
        if (scope >= g->nvlink_count) { f->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT; return; }
        fv_u(f, g->links[scope].state, 0);
        return;
    case 166:
        if (g->nvlink_count == 0) return;
        if (scope >= g->nvlink_count) { f->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT; return; }
        fv_u(f, nvlink_version_enum(g->links[scope].version), 0);
        return;
    case 185: case 186: t = telemetry(g); fv_u(f, (unsigned long long)lround(t.power), 0); return;
    case 187: fv_u(f, g->power_min_limit, 0); return;
    case 188: fv_u(f, g->power_max_limit, 0); return;
    case 189: fv_u(f, g->power_default_limit, 0); return;
    case 190: case 192: fv_u(f, g->power_limit, 0); return;
    case 193: fv_u(f, g->temp_shutdown, 0); return;
    case 230: /* NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: an nvmlDeviceGpuRecoveryAction_t */
        if (g->recovery_supported) fv_u(f, g->recovery_action, 0);
        return;
    default: return;
    }
}

EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(void *h, int count, nvmlFieldValue_t *values) {
    GPU_OR_RETURN(h);
    if (count < 0 || (count > 0 && !values)) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < count; i++) field_value(g, &values[i]);
    return NVML_SUCCESS;
}

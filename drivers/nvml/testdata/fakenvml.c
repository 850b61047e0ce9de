/*
 * A stand-in for libnvidia-ml.so.1: the NVML calls the driver makes, with
 * nvml.h's signatures and return codes, answering for two GPUs from fixed
 * figures. The tests build it with the system C compiler and load it
 * through the real loader, so that what crosses into C (argument order,
 * widths, out-pointers, buffer sizes, handles) is what NVML would see.
 *
 * -DNO_INIT leaves out nvmlInit_v2 (a library that is not NVML);
 * -DNO_ENERGY leaves out nvmlDeviceGetTotalEnergyConsumption (an old
 * driver).
 */
#include <stdio.h>

typedef int nvmlReturn_t;
enum {
	OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3,
	INSUFFICIENT_SIZE = 7
};

struct dev {
	const char *name, *uuid;
	int counter;                 /* has the energy counter */
	unsigned long long energy;   /* mJ */
	unsigned int power, enforced, management; /* mW; 0: not supported */
};

/* GPU 0's name is longer than NVML's old 64-byte buffer. */
static struct dev devs[2];
static int inits;

/*
 * Static, so that a second copy of this library loaded with RTLD_GLOBAL
 * resets its own GPUs rather than the first copy's.
 */
static void reset(void) {
	devs[0] = (struct dev){"NVIDIA H100 80GB HBM3, a fake whose name is longer than sixty-four bytes",
		"GPU-5d0c8f2e-0000-4000-8000-000000000000", 1, 5000000000000ULL, 312345, 700000, 650000};
	devs[1] = (struct dev){"Tesla P100-PCIE-16GB", "GPU-5d0c8f2e-0000-4000-8000-000000000001",
		0, 0, 41250, 0, 250000};
	inits = 0;
}

void fake_reset(void) { reset(); }

int fake_inits(void) { return inits; }

static int valid(struct dev *d) { return inits > 0 && (d == &devs[0] || d == &devs[1]); }

#ifndef NO_INIT
nvmlReturn_t nvmlInit_v2(void) {
	if (devs[0].name == 0)
		reset();
	inits++;
	return OK;
}
#endif

nvmlReturn_t nvmlShutdown(void) {
	if (inits == 0)
		return UNINITIALIZED;
	inits--;
	return OK;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) {
	if (inits == 0)
		return UNINITIALIZED;
	*n = 2;
	return OK;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, struct dev **d) {
	if (inits == 0)
		return UNINITIALIZED;
	if (i >= 2)
		return INVALID_ARGUMENT;
	*d = &devs[i];
	return OK;
}

static nvmlReturn_t str(const char *s, char *buf, unsigned int len) {
	if (len < 96) /* NVML_DEVICE_{NAME,UUID}_V2_BUFFER_SIZE */
		return INSUFFICIENT_SIZE;
	snprintf(buf, len, "%s", s);
	return OK;
}

nvmlReturn_t nvmlDeviceGetName(struct dev *d, char *buf, unsigned int len) {
	return valid(d) ? str(d->name, buf, len) : INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetUUID(struct dev *d, char *buf, unsigned int len) {
	return valid(d) ? str(d->uuid, buf, len) : INVALID_ARGUMENT;
}

#ifndef NO_ENERGY
/* Each read finds 35 J more than the last. */
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(struct dev *d, unsigned long long *mj) {
	if (!valid(d))
		return INVALID_ARGUMENT;
	if (!d->counter)
		return NOT_SUPPORTED;
	*mj = d->energy;
	d->energy += 35000;
	return OK;
}
#endif

static nvmlReturn_t mw(unsigned int v, unsigned int *out) {
	if (v == 0)
		return NOT_SUPPORTED;
	*out = v;
	return OK;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(struct dev *d, unsigned int *out) {
	return valid(d) ? mw(d->power, out) : INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(struct dev *d, unsigned int *out) {
	return valid(d) ? mw(d->enforced, out) : INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(struct dev *d, unsigned int *out) {
	return valid(d) ? mw(d->management, out) : INVALID_ARGUMENT;
}

package nvml

import "fmt"

// Library is the NVML calls the driver makes, one method per C function
// of nvml.h and named after it. Open fills it with the library loaded at
// run time (dl.go); tests fill it with a fake that answers as NVML does,
// so that the driver above it is the code that runs on a GPU.
type Library interface {
	Init() Return                                                // nvmlInit_v2
	Shutdown() Return                                            // nvmlShutdown
	DeviceGetCount() (int, Return)                               // nvmlDeviceGetCount_v2
	DeviceGetHandleByIndex(index int) (Device, Return)           // nvmlDeviceGetHandleByIndex_v2
	DeviceGetName(dev Device) (string, Return)                   // nvmlDeviceGetName
	DeviceGetUUID(dev Device) (string, Return)                   // nvmlDeviceGetUUID
	DeviceGetTotalEnergyConsumption(dev Device) (uint64, Return) // nvmlDeviceGetTotalEnergyConsumption, mJ
	DeviceGetPowerUsage(dev Device) (uint32, Return)             // nvmlDeviceGetPowerUsage, mW
	DeviceGetEnforcedPowerLimit(dev Device) (uint32, Return)     // nvmlDeviceGetEnforcedPowerLimit, mW
	DeviceGetPowerManagementLimit(dev Device) (uint32, Return)   // nvmlDeviceGetPowerManagementLimit, mW
}

// Device is an nvmlDevice_t: an opaque handle NVML hands out and takes
// back, never dereferenced on this side.
type Device uintptr

// Return is an nvmlReturn_t. Every value but Success is an error.
type Return int32

// The nvmlReturn_t values of nvml.h.
const (
	Success                      Return = 0
	ErrorUninitialized           Return = 1
	ErrorInvalidArgument         Return = 2
	ErrorNotSupported            Return = 3
	ErrorNoPermission            Return = 4
	ErrorAlreadyInitialized      Return = 5
	ErrorNotFound                Return = 6
	ErrorInsufficientSize        Return = 7
	ErrorInsufficientPower       Return = 8
	ErrorDriverNotLoaded         Return = 9
	ErrorTimeout                 Return = 10
	ErrorIRQIssue                Return = 11
	ErrorLibraryNotFound         Return = 12
	ErrorFunctionNotFound        Return = 13
	ErrorCorruptedInforom        Return = 14
	ErrorGPUIsLost               Return = 15
	ErrorResetRequired           Return = 16
	ErrorOperatingSystem         Return = 17
	ErrorLibRMVersionMismatch    Return = 18
	ErrorInUse                   Return = 19
	ErrorMemory                  Return = 20
	ErrorNoData                  Return = 21
	ErrorVGPUECCNotSupported     Return = 22
	ErrorInsufficientResources   Return = 23
	ErrorFreqNotSupported        Return = 24
	ErrorArgumentVersionMismatch Return = 25
	ErrorDeprecated              Return = 26
	ErrorNotReady                Return = 27
	ErrorGPUNotFound             Return = 28
	ErrorInvalidState            Return = 29
	ErrorResetTypeNotSupported   Return = 30
	ErrorUnknown                 Return = 999
)

// returnNames are nvml.h's names for its return codes. They are written
// here rather than asked of nvmlErrorString so that an error reads the
// same whether or not the library is loaded, and can be searched for in
// NVIDIA's documentation.
var returnNames = map[Return]string{
	Success:                      "NVML_SUCCESS",
	ErrorUninitialized:           "NVML_ERROR_UNINITIALIZED",
	ErrorInvalidArgument:         "NVML_ERROR_INVALID_ARGUMENT",
	ErrorNotSupported:            "NVML_ERROR_NOT_SUPPORTED",
	ErrorNoPermission:            "NVML_ERROR_NO_PERMISSION",
	ErrorAlreadyInitialized:      "NVML_ERROR_ALREADY_INITIALIZED",
	ErrorNotFound:                "NVML_ERROR_NOT_FOUND",
	ErrorInsufficientSize:        "NVML_ERROR_INSUFFICIENT_SIZE",
	ErrorInsufficientPower:       "NVML_ERROR_INSUFFICIENT_POWER",
	ErrorDriverNotLoaded:         "NVML_ERROR_DRIVER_NOT_LOADED",
	ErrorTimeout:                 "NVML_ERROR_TIMEOUT",
	ErrorIRQIssue:                "NVML_ERROR_IRQ_ISSUE",
	ErrorLibraryNotFound:         "NVML_ERROR_LIBRARY_NOT_FOUND",
	ErrorFunctionNotFound:        "NVML_ERROR_FUNCTION_NOT_FOUND",
	ErrorCorruptedInforom:        "NVML_ERROR_CORRUPTED_INFOROM",
	ErrorGPUIsLost:               "NVML_ERROR_GPU_IS_LOST",
	ErrorResetRequired:           "NVML_ERROR_RESET_REQUIRED",
	ErrorOperatingSystem:         "NVML_ERROR_OPERATING_SYSTEM",
	ErrorLibRMVersionMismatch:    "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
	ErrorInUse:                   "NVML_ERROR_IN_USE",
	ErrorMemory:                  "NVML_ERROR_MEMORY",
	ErrorNoData:                  "NVML_ERROR_NO_DATA",
	ErrorVGPUECCNotSupported:     "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
	ErrorInsufficientResources:   "NVML_ERROR_INSUFFICIENT_RESOURCES",
	ErrorFreqNotSupported:        "NVML_ERROR_FREQ_NOT_SUPPORTED",
	ErrorArgumentVersionMismatch: "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
	ErrorDeprecated:              "NVML_ERROR_DEPRECATED",
	ErrorNotReady:                "NVML_ERROR_NOT_READY",
	ErrorGPUNotFound:             "NVML_ERROR_GPU_NOT_FOUND",
	ErrorInvalidState:            "NVML_ERROR_INVALID_STATE",
	ErrorResetTypeNotSupported:   "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED",
	ErrorUnknown:                 "NVML_ERROR_UNKNOWN",
}

// Error implements error: nvml.h's name for the code.
func (r Return) Error() string {
	if s, ok := returnNames[r]; ok {
		return s
	}
	return fmt.Sprintf("NVML return code %d", int32(r))
}

// unsupported reports whether ret means the GPU or driver lacks the call.
func unsupported(ret Return) bool {
	return ret == ErrorNotSupported || ret == ErrorFunctionNotFound
}

package nvml

// DefaultPath is the soname the driver installs.
const DefaultPath = "libnvidia-ml.so.1"

// Open loads libnvidia-ml.so.1 and resolves its symbols; it does not call
// nvmlInit (Init does). The error wraps ErrNoLibrary when the library or
// one of its required entry points is missing.
func Open() (Lib, error) { return OpenPath(DefaultPath) }

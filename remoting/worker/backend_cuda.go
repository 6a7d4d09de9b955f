package worker

// cudaDriver is the real-GPU backend. It stays empty (never available)
// until package remoting/backend/cuda is part of the build; wiring it in
// is filling these three functions.
var cudaDriver = driver{available: func() bool { return false }}

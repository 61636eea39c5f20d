// Package ipc reaches peers' memory across processes with CUDA IPC
// handles (cuIpcGetMemHandle / cuIpcOpenMemHandle), exchanged through the
// bootstrap.
package ipc

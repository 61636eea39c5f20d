#include "textflag.h"

// Two-source float sums, SSE2 (every x86-64 CPU has it). ADDPS and ADDPD
// add lane by lane with the scalar instructions' rounding and NaN rules
// (the first operand's NaN wins, as in Go's x + y).

// func f32(d, x, y *float32, n int)
TEXT ·f32(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ n+24(FP), CX
f32by16:
	CMPQ CX, $16
	JLT  f32by4
	MOVUPS 0(SI), X0
	MOVUPS 16(SI), X1
	MOVUPS 32(SI), X2
	MOVUPS 48(SI), X3
	MOVUPS 0(DX), X4
	MOVUPS 16(DX), X5
	MOVUPS 32(DX), X6
	MOVUPS 48(DX), X7
	ADDPS  X4, X0
	ADDPS  X5, X1
	ADDPS  X6, X2
	ADDPS  X7, X3
	MOVUPS X0, 0(DI)
	MOVUPS X1, 16(DI)
	MOVUPS X2, 32(DI)
	MOVUPS X3, 48(DI)
	ADDQ   $64, SI
	ADDQ   $64, DX
	ADDQ   $64, DI
	SUBQ   $16, CX
	JMP    f32by16
f32by4:
	CMPQ CX, $4
	JLT  f32by1
	MOVUPS (SI), X0
	MOVUPS (DX), X1
	ADDPS  X1, X0
	MOVUPS X0, (DI)
	ADDQ   $16, SI
	ADDQ   $16, DX
	ADDQ   $16, DI
	SUBQ   $4, CX
	JMP    f32by4
f32by1:
	TESTQ CX, CX
	JEQ   f32done
	MOVSS (SI), X0
	MOVSS (DX), X1
	ADDSS X1, X0
	MOVSS X0, (DI)
	ADDQ  $4, SI
	ADDQ  $4, DX
	ADDQ  $4, DI
	DECQ  CX
	JMP   f32by1
f32done:
	RET

// func f64(d, x, y *float64, n int)
TEXT ·f64(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ n+24(FP), CX
f64by8:
	CMPQ CX, $8
	JLT  f64by2
	MOVUPD 0(SI), X0
	MOVUPD 16(SI), X1
	MOVUPD 32(SI), X2
	MOVUPD 48(SI), X3
	MOVUPD 0(DX), X4
	MOVUPD 16(DX), X5
	MOVUPD 32(DX), X6
	MOVUPD 48(DX), X7
	ADDPD  X4, X0
	ADDPD  X5, X1
	ADDPD  X6, X2
	ADDPD  X7, X3
	MOVUPD X0, 0(DI)
	MOVUPD X1, 16(DI)
	MOVUPD X2, 32(DI)
	MOVUPD X3, 48(DI)
	ADDQ   $64, SI
	ADDQ   $64, DX
	ADDQ   $64, DI
	SUBQ   $8, CX
	JMP    f64by8
f64by2:
	CMPQ CX, $2
	JLT  f64by1
	MOVUPD (SI), X0
	MOVUPD (DX), X1
	ADDPD  X1, X0
	MOVUPD X0, (DI)
	ADDQ   $16, SI
	ADDQ   $16, DX
	ADDQ   $16, DI
	SUBQ   $2, CX
	JMP    f64by2
f64by1:
	TESTQ CX, CX
	JEQ   f64done
	MOVSD (SI), X0
	MOVSD (DX), X1
	ADDSD X1, X0
	MOVSD X0, (DI)
f64done:
	RET

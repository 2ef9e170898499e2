#include "textflag.h"

// func request(args *[6]uint64) uint64
//
// Valgrind's client request on amd64: RAX points at the request and its
// five arguments, the answer comes back in RDX (left as is, 0, on a real
// CPU). The four rotations of RDI (by 128 bits in all: RDI unchanged)
// followed by xchg rbx,rbx are the marker valgrind looks for; they are
// spelt as bytes so that the assembler emits exactly that encoding.
TEXT ·request(SB), NOSPLIT, $0-16
	MOVQ args+0(FP), AX
	MOVQ $0, DX
	BYTE $0x48; BYTE $0xc1; BYTE $0xc7; BYTE $0x03 // rol rdi, 3
	BYTE $0x48; BYTE $0xc1; BYTE $0xc7; BYTE $0x0d // rol rdi, 13
	BYTE $0x48; BYTE $0xc1; BYTE $0xc7; BYTE $0x3d // rol rdi, 61
	BYTE $0x48; BYTE $0xc1; BYTE $0xc7; BYTE $0x33 // rol rdi, 51
	BYTE $0x48; BYTE $0x87; BYTE $0xdb             // xchg rbx, rbx
	MOVQ DX, ret+8(FP)
	RET

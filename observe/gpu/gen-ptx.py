#!/usr/bin/env python3
"""Regenerates every committed PTX of the repository from its .cu source with NVRTC (the
nvidia-cuda-nvrtc-cu12 wheel; the nvidia-cuda-nvcc-cu12 wheel ships ptxas and libNVVM but no
nvcc driver): observe's device poller (observe/gpu) and the example workloads' kernels
(examples/gpu). All include observe/gpu/ibgda.cuh.

usage: gen-ptx.py [--check]   (--check: fail if a committed .ptx differs from a fresh build)
"""
import ctypes, glob, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# Paths from the repository root; each PTX is written next to its source.
SOURCES = ["observe/gpu/poller.cu", "examples/gpu/bfs.cu", "examples/gpu/moe.cu", "examples/gpu/smoke.cu"]
ARCH = "compute_80"  # PTX for sm_80; forward compatible, ptxas assembles it for sm_90 too


def nvrtc():
    import nvidia.cuda_nvrtc as m
    libs = sorted(glob.glob(os.path.join(list(m.__path__)[0], "lib", "libnvrtc.so*")))
    libs = [l for l in libs if "builtins" not in l and "alt" not in l]
    if not libs:
        sys.exit("gen-ptx: libnvrtc not found in the nvidia-cuda-nvrtc-cu12 wheel")
    return ctypes.CDLL(libs[0])


def compile_one(lib, path):
    name = os.path.basename(path)
    src = open(os.path.join(ROOT, path), "rb").read()
    header = open(os.path.join(HERE, "ibgda.cuh"), "rb").read()
    prog = ctypes.c_void_p()
    hdrs = (ctypes.c_char_p * 1)(header)
    names = (ctypes.c_char_p * 1)(b"ibgda.cuh")
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), src, name.encode(), 1, hdrs, names)
    if rc:
        sys.exit(f"gen-ptx: nvrtcCreateProgram({name}) = {rc}")
    opts = [f"--gpu-architecture={ARCH}".encode(), b"-std=c++17", b"--device-as-default-execution-space"]
    copts = (ctypes.c_char_p * len(opts))(*opts)
    rc = lib.nvrtcCompileProgram(prog, len(opts), copts)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    if rc:
        sys.exit(f"gen-ptx: {name} failed to compile:\n{log.value.decode()}")
    lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetPTX(prog, ptx)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx.value.decode()


def main():
    check = "--check" in sys.argv
    lib = nvrtc()
    bad = []
    for path in SOURCES:
        ptx = compile_one(lib, path)
        out = os.path.join(ROOT, path[:-3] + ".ptx")
        if check:
            if not os.path.exists(out) or open(out).read() != ptx:
                bad.append(out)
        else:
            open(out, "w").write(ptx)
            print(f"gen-ptx: wrote {out}")
    if bad:
        sys.exit("gen-ptx: stale PTX (run observe/gpu/gen-ptx.py): " + ", ".join(bad))


if __name__ == "__main__":
    main()

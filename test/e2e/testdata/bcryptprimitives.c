/* bcryptprimitives.dll for Wine 8, whose own lacks ProcessPrng: Go >= 1.24
 * Windows programs call it for random bytes. This one forwards to
 * RtlGenRandom (advapi32's SystemFunction036), which Wine has. Built by
 * TestWindowsWorkerUnderWine with x86_64-w64-mingw32-gcc. */
#include <windows.h>

typedef BOOLEAN (WINAPI *rtlgen_fn)(PVOID, ULONG);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    static rtlgen_fn gen;
    if (!gen)
        gen = (rtlgen_fn)GetProcAddress(LoadLibraryA("advapi32.dll"), "SystemFunction036");
    while (len > 0) {
        ULONG n = len > 0x7fffffff ? 0x7fffffff : (ULONG)len;
        if (!gen || !gen(data, n))
            return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}

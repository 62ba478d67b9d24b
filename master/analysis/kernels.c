/* The master's rollup kernels in C (master.analysis.kernels calls them through ctypes,
 * master.analysis.native builds and loads them). */

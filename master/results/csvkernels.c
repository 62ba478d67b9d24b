/* The CSV writers' kernels in C (master.results.csvkernels calls them through ctypes,
 * master.analysis.native builds and loads them). */

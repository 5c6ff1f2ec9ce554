/* gcc's -fsanitize-coverage=trace-cmp also traces float compares; libFuzzer
 * has no hooks for those.  No-op definitions so instrumented code loads. */
void __sanitizer_cov_trace_cmpf(float a, float b) { (void)a; (void)b; }
void __sanitizer_cov_trace_cmpd(double a, double b) { (void)a; (void)b; }

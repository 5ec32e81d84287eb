// Must not compile: chunk_kda_inter_solve has no implementation for an unknown backend, and the
// static_assert names the header to include.
#include <kda/inter_solve.hpp>

struct my_backend {};

int main() {
    kda::chunk_kda_inter_solve<my_backend, 64, 16, 64> policy;
    (void)policy;
}

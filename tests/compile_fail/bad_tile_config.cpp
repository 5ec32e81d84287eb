// Must not compile: BC must be 16.
#include <kda/tile_config.hpp>

int main() { return kda::tile_config<64, 8, 64>::NC; }

#pragma once

namespace quantkv::tool {
int run_info();
}

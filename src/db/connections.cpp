// Connections: a cache of weak references keyed by canonical path.
#include "db/connections.hpp"

#include <filesystem>

#include "db/sqlite_db.hpp"

namespace dnnlab::db {

std::shared_ptr<sqlite::Database> Connections::sqlite(const std::string& path,
                                                      double busy_timeout_seconds) {
  std::error_code ec;
  const auto canonical = std::filesystem::weakly_canonical(path, ec);
  const std::string key = ec ? path : canonical.string();
  if (auto open = sqlite_[key].lock()) return open;
  auto db = std::make_shared<sqlite::Database>(path, sqlite::DatabaseOptions{busy_timeout_seconds});
  sqlite_[key] = db;
  return db;
}

}  // namespace dnnlab::db

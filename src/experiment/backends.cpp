// open_backends(): one db::Connections for the pair, so equal URLs share.
#include "experiment/backends.hpp"

#include "db/connections.hpp"

namespace dnnlab::experiment {

Backends open_backends(const std::string& broker_url, const std::string& store_url,
                       const store::StoreOptions& store_options) {
  Backends b;
  b.broker_url = broker_url;
  b.store_url = store_url;
  db::Connections shared;  // the queue and store keep what they use
  b.queue = queue::open_task_queue(broker_url, {}, &shared);
  b.store = store::open_result_store(store_url, &shared, store_options);
  return b;
}

}  // namespace dnnlab::experiment

// Replaced by the transport implementation.
namespace rt::net { int placeholder_symbol = 0; }

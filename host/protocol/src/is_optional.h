#pragma once
// Whether a field's type is std::optional: the field visitors of the events
// and of the cell record write such a field only when it is set.

#include <optional>
#include <type_traits>

namespace trainbench::protocol {

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

}  // namespace trainbench::protocol

// Where a request body ends must be unambiguous before any of it is read: a Content-Length that
// is not one plain decimal number, or one beside Transfer-Encoding, is refused (400) and the
// connection closed, since the server cannot know where the next request would begin. A request
// answered before its body is read (refused by the access rules) also closes its connection. (Two
// parties that read such a head differently is how requests are smuggled past a proxy.)
//
// Tested in tests/server/server_framing_test.cpp.
#pragma once

#include <httplib.h>

namespace qwick {

// Throws ApiError (400, param null) for a body whose length the head leaves in doubt.
void check_framing(const httplib::Request& req);

// The head announces a body: a Content-Length other than "0", or a Transfer-Encoding.
bool announces_body(const httplib::Request& req);

}  // namespace qwick

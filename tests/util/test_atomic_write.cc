// The atomic writer's rules for what an output path may be: a regular
// file or a new path is replaced whole; a symbolic link's target is
// replaced, the link kept; a character device or a FIFO is written
// through (never replaced by a regular file: as root, renaming over
// /dev/null would replace the device); a FIFO nobody reads is an error,
// not a wait; a directory is refused.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>

#include "tests/support/process.h"
extern "C" {
#include "util/atomic_write.h"
}

namespace {

using tpcc_test::contains;
using tpcc_test::slurp;
using tpcc_test::TempDir;

int write(const std::string &path, const std::string &text, std::string &err)
{
    char msg[600] = "";
    tp_bytes piece = {text.data(), text.size()};
    int rc = tp_write_file_atomic(path.c_str(), &piece, 1, msg, sizeof msg);
    err = msg;
    return rc;
}

bool is(const std::string &path, mode_t kind)
{
    struct stat st;
    return lstat(path.c_str(), &st) == 0 && (st.st_mode & S_IFMT) == kind;
}

TEST(AtomicWrite, ReplacesARegularFileOrMakesANewOne)
{
    TempDir d;
    std::string err, old = d.write("a", "old");
    ASSERT_EQ(write(old, "new", err), 0) << err;
    EXPECT_EQ(slurp(old), "new");
    ASSERT_EQ(write(d.path + "/b", "fresh", err), 0) << err;
    EXPECT_EQ(slurp(d.path + "/b"), "fresh");
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(d.path), {}), 2) << "no temporary file left";
}

TEST(AtomicWrite, ALinksTargetIsReplacedAndTheLinkKept)
{
    TempDir d;
    std::string err, target = d.write("target", "old"), link = d.path + "/link";
    ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
    ASSERT_EQ(write(link, "new", err), 0) << err;
    EXPECT_TRUE(is(link, S_IFLNK));
    EXPECT_EQ(slurp(target), "new");
    std::string dangling = d.path + "/dangling";
    ASSERT_EQ(symlink((d.path + "/missing").c_str(), dangling.c_str()), 0);
    EXPECT_EQ(write(dangling, "x", err), -1);
    EXPECT_TRUE(contains(err, "it is a symbolic link to a missing file")) << err;
}

TEST(AtomicWrite, ACharacterDeviceIsWrittenThrough)
{
    std::string err;
    ASSERT_EQ(write("/dev/null", "bytes", err), 0) << err;
    EXPECT_TRUE(is("/dev/null", S_IFCHR));
}

TEST(AtomicWrite, AFifoIsWrittenThroughToItsReader)
{
    TempDir d;
    std::string fifo = d.path + "/fifo", err, got;
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    // no reader: an error at once, not a wait
    EXPECT_EQ(write(fifo, "bytes", err), -1);
    EXPECT_TRUE(contains(err, "it is a FIFO and no process reads it")) << err;
    int fd = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);     // a reader
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fifo, "bytes", err), 0) << err;
    char buf[16];
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    EXPECT_EQ(std::string(buf, n > 0 ? size_t(n) : 0), "bytes");
    EXPECT_TRUE(is(fifo, S_IFIFO));
}

TEST(AtomicWrite, ADirectoryIsRefused)
{
    TempDir d;
    std::string err;
    EXPECT_EQ(write(d.path, "x", err), -1);
    EXPECT_TRUE(contains(err, "it is a directory, not a regular file; name a file")) << err;
    EXPECT_TRUE(is(d.path, S_IFDIR));
}

TEST(AtomicWrite, SameFileThroughLinks)
{
    TempDir d;
    std::string a = d.write("a", "x"), b = d.write("b", "x"), hard = d.path + "/hard", soft = d.path + "/soft";
    ASSERT_EQ(link(a.c_str(), hard.c_str()), 0);
    ASSERT_EQ(symlink(a.c_str(), soft.c_str()), 0);
    EXPECT_TRUE(tp_same_file(a.c_str(), hard.c_str()));
    EXPECT_TRUE(tp_same_file(soft.c_str(), a.c_str()));
    EXPECT_FALSE(tp_same_file(a.c_str(), b.c_str()));
    EXPECT_FALSE(tp_same_file(a.c_str(), (d.path + "/missing").c_str()));
    EXPECT_FALSE(tp_same_file(a.c_str(), nullptr));
}

}  // namespace
